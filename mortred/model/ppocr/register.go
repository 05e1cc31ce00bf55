// Package ppocr serves image models of four kinds on ONNX Runtime, each set
// up by its model TOML so that another ONNX model of the same kind needs no
// code: "classification" (generic), "text_detection" (DBNet),
// "text_recognition" (CTC) and "ocr" (detection → direction → recognition
// in one request). The PP-OCR family is what conf/models configures.
//
// Every factory loads the ONNX Runtime library first (model.Options.ORTLib,
// else MORTRED_ORT_LIB) and creates its sessions once; an instance is one
// worker's and never runs concurrently (model.Model's contract), so its
// buffers are reused without locks. Prepare and ValidateParams only read the
// configuration: they are safe to call from many request goroutines at once,
// also while Run is running.
package ppocr

import "github.com/fe64bb06/frontdoor/mortred/model"

func init() {
	model.Register("classification", newClassification)
	model.Register("text_detection", newDetection)
	model.Register("text_recognition", newRecognition)
	model.Register("ocr", newOCR)
}
