package envelope

import "reflect"

// Task payloads: what results[i].data holds for each kind of model. Models
// return these types (or JSON of the same shape); docs/openapi.json publishes
// them under components.schemas.

// Classification is the payload of classification models.
type Classification struct {
	ClassID  int          `json:"class_id"`
	Category string       `json:"category"`
	Scores   []float64    `json:"scores" doc:"full softmax, indexed by class id"`
	Top      []ClassScore `json:"top,omitempty" doc:"the top_k best classes scoring at least score_threshold, best first (empty when none does); the classification model type always answers it"`
}

// ClassScore is one class of a classification's top list.
type ClassScore struct {
	ClassID  int     `json:"class_id"`
	Category string  `json:"category"`
	Score    float64 `json:"score" doc:"0..1"`
}

// ClassificationParams are the params of a classification model; an unset
// key takes the model TOML's value.
type ClassificationParams struct {
	TopK           int     `json:"top_k,omitempty" doc:"most classes in top, 1..the model's class count"`
	ScoreThreshold float64 `json:"score_threshold,omitempty" doc:"minimum score of a class in top, 0..1"`
}

// Detection is one object of a detection payload (data is an array of them).
type Detection struct {
	ClassID  int        `json:"class_id"`
	Score    float64    `json:"score"`
	Category string     `json:"category"`
	BBox     [4]float64 `json:"bbox" doc:"x1, y1, x2, y2 in input pixels"`
}

// FaceDetection is one face of a face detection payload (data is an array
// of them, best first).
type FaceDetection struct {
	Score     float64      `json:"score" doc:"0..1"`
	BBox      [4]float64   `json:"bbox" doc:"x1, y1, x2, y2 in input pixels"`
	Keypoints [][2]float64 `json:"keypoints" doc:"[x, y] in input pixels: the subject's right eye, left eye, nose tip, mouth centre, right ear tragion, left ear tragion"`
}

// DetectionParams are the params of a detection model; an unset key takes
// the model TOML's value.
type DetectionParams struct {
	ScoreThreshold float64 `json:"score_threshold,omitempty" doc:"minimum class score of a box, 0..1"`
	NMSIoU         float64 `json:"nms_iou,omitempty" doc:"overlap (IoU) above which the lower-scored box of a class is dropped, 0..1"`
	MaxResults     int     `json:"max_results,omitempty" doc:"most boxes returned, 0..1000, 0 = all"`
}

// FaceDetectionParams are the params of a face_detection model; an unset
// key takes the model TOML's value.
type FaceDetectionParams struct {
	ScoreThreshold float64 `json:"score_threshold,omitempty" doc:"minimum face score, 0..1"`
	NMSIoU         float64 `json:"nms_iou,omitempty" doc:"overlap (IoU) at which detections blend into one face, 0..1"`
	MaxResults     int     `json:"max_results,omitempty" doc:"most faces returned, 0..1000, 0 = all"`
}

// Segmentation is the payload of a segmentation model: the mask of its one
// class (a person, for the selfie segmenter) at the input image's size.
type Segmentation struct {
	Mask     string     `json:"mask" doc:"base64 PNG, 8-bit grey, input-image size: 255 in the mask, 0 outside"`
	Width    int        `json:"width"`
	Height   int        `json:"height"`
	BBox     [4]float64 `json:"bbox" doc:"x1, y1, x2, y2 of the mask in input pixels (x2, y2 exclusive); all 0 when the mask is empty"`
	Coverage float64    `json:"coverage" doc:"fraction of the image's pixels in the mask, 0..1"`
}

// SuperResolution is the payload of a super-resolution model.
type SuperResolution struct {
	Image  string `json:"image" doc:"base64 PNG of the upscaled image"`
	Width  int    `json:"width" doc:"the upscaled image's width: scale × the input's"`
	Height int    `json:"height"`
	Scale  int    `json:"scale"`
}

// SegmentationParams are the params of a segmentation model.
type SegmentationParams struct {
	Threshold float64 `json:"threshold,omitempty" doc:"mask probability at or above which a pixel is in the mask, 0..1"`
}

// TextDetection is one text region of a DBNet payload (data is an array).
type TextDetection struct {
	Score   float64      `json:"score"`
	BBox    [4]float64   `json:"bbox" doc:"x1, y1, x2, y2 in input pixels"`
	Polygon [][2]float64 `json:"polygon" doc:"region outline as [x, y] points"`
}

// TextRecognition is the payload of a text-line recogniser.
type TextRecognition struct {
	Text  string  `json:"text"`
	Score float64 `json:"score" doc:"mean character confidence, 0..1"`
}

// OCRLine is one line of an OCR payload (data is an array): detection,
// direction and recognition together.
type OCRLine struct {
	BBox    [4]float64   `json:"bbox" doc:"x1, y1, x2, y2 in input pixels"`
	Polygon [][2]float64 `json:"polygon"`
	Text    string       `json:"text"`
	Score   float64      `json:"score"`
	Angle   int          `json:"angle" doc:"0 or 180: the direction the line was read in"`
}

// ImageOutput is the payload of segmentation, matting and enhancement.
type ImageOutput struct {
	Image string `json:"image" doc:"base64 image in options.encoding (PNG by default)"`
}

// Payload is a named payload schema; Array means data is a list of Type.
// A new task adds its type here (the document must not depend on which model
// packages a binary links), then regenerates docs/openapi.json.
type Payload struct {
	Name  string
	Type  reflect.Type
	Array bool
}

var payloads = []Payload{
	{"Classification", reflect.TypeFor[Classification](), false},
	{"Detection", reflect.TypeFor[Detection](), true},
	{"FaceDetection", reflect.TypeFor[FaceDetection](), true},
	{"Segmentation", reflect.TypeFor[Segmentation](), false},
	{"SuperResolution", reflect.TypeFor[SuperResolution](), false},
	{"TextDetection", reflect.TypeFor[TextDetection](), true},
	{"TextRecognition", reflect.TypeFor[TextRecognition](), false},
	{"OCRLine", reflect.TypeFor[OCRLine](), true},
	{"ImageOutput", reflect.TypeFor[ImageOutput](), false},
}

// ParamsSchema is a named params schema: what a task's params object may
// hold. The schemas are strict (any other key answers 422).
type ParamsSchema struct {
	Name string
	Type reflect.Type
}

var paramsSchemas = []ParamsSchema{
	{"ClassificationParams", reflect.TypeFor[ClassificationParams]()},
	{"DetectionParams", reflect.TypeFor[DetectionParams]()},
	{"FaceDetectionParams", reflect.TypeFor[FaceDetectionParams]()},
	{"SegmentationParams", reflect.TypeFor[SegmentationParams]()},
}
