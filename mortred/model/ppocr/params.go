package ppocr

import (
	"encoding/json"

	"github.com/fe64bb06/frontdoor/mortred/model"
	"github.com/fe64bb06/frontdoor/mortred/model/modelconf"
)

// params are the request knobs; nil means "use the model TOML's value".
type params struct {
	Thresh, BoxThresh, UnclipRatio *float64
	MaxResults                     *int
	ClsThresh, MinScore            *float64
	UseAngleCls                    *bool
}

type paramSpec struct {
	kind modelconf.Kind
	hi   float64
	doc  string
	set  func(p *params, v any)
}

var allParams = map[string]paramSpec{
	"thresh": {modelconf.Prob, 1, "probability-map binarisation threshold, 0..1",
		func(p *params, v any) { f := v.(float64); p.Thresh = &f }},
	"box_thresh": {modelconf.Prob, 1, "minimum box score, 0..1",
		func(p *params, v any) { f := v.(float64); p.BoxThresh = &f }},
	"unclip_ratio": {modelconf.PosNum, 4, "box expansion ratio, >0..4",
		func(p *params, v any) { f := v.(float64); p.UnclipRatio = &f }},
	"max_results": {modelconf.Count, 10000, "most boxes/lines returned, 0 = all",
		func(p *params, v any) { n := v.(int); p.MaxResults = &n }},
	"cls_thresh": {modelconf.Prob, 1, "p(180) above which a line is turned, 0..1",
		func(p *params, v any) { f := v.(float64); p.ClsThresh = &f }},
	"min_score": {modelconf.Prob, 1, "lines recognised with a lower score are dropped, 0..1",
		func(p *params, v any) { f := v.(float64); p.MinScore = &f }},
	"use_angle_cls": {modelconf.Bool, 0, "run the direction classifier, true/false",
		func(p *params, v any) { b := v.(bool); p.UseAngleCls = &b }},
}

// Params each model type accepts; anything else is a 422.
var (
	noParams        []string
	detectionParams = []string{"thresh", "box_thresh", "unclip_ratio", "max_results"}
	ocrParams       = []string{"thresh", "box_thresh", "unclip_ratio", "max_results", "cls_thresh", "min_score", "use_angle_cls"}
)

// parseParams checks every key of raw against accepted and returns the parsed
// values, or one FieldError per bad key (sorted by pointer).
func parseParams(task string, accepted []string, raw map[string]json.RawMessage) (params, []model.FieldError) {
	specs := make([]modelconf.Param, len(accepted))
	for i, key := range accepted {
		s := allParams[key]
		specs[i] = modelconf.Param{Key: key, Kind: s.kind, Max: s.hi, Doc: s.doc}
	}
	vals, errs := modelconf.Parse(task, specs, raw)
	var p params
	for key, v := range vals {
		allParams[key].set(&p, v)
	}
	return p, errs
}

// invalidParams turns FieldErrors met in Prepare (a server that skipped
// ValidateParams) into an item error with the 422 status.
func invalidParams(errs []model.FieldError) error { return modelconf.Invalid(errs) }
