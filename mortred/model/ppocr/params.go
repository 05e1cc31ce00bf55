package ppocr

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/fe64bb06/frontdoor/mortred/envelope"
	"github.com/fe64bb06/frontdoor/mortred/model"
)

// params are the request knobs; nil means "use the model TOML's value".
type params struct {
	Thresh, BoxThresh, UnclipRatio *float64
	MaxResults                     *int
	ClsThresh, MinScore            *float64
	UseAngleCls                    *bool
}

type paramKind int

const (
	kindProb   paramKind = iota // number in [0,1]
	kindPosNum                  // number in (0, hi]
	kindCount                   // integer in [0, hi]
	kindBool
)

type paramSpec struct {
	kind paramKind
	hi   float64
	doc  string
	set  func(p *params, v any)
}

var allParams = map[string]paramSpec{
	"thresh": {kindProb, 1, "probability-map binarisation threshold, 0..1",
		func(p *params, v any) { f := v.(float64); p.Thresh = &f }},
	"box_thresh": {kindProb, 1, "minimum box score, 0..1",
		func(p *params, v any) { f := v.(float64); p.BoxThresh = &f }},
	"unclip_ratio": {kindPosNum, 4, "box expansion ratio, >0..4",
		func(p *params, v any) { f := v.(float64); p.UnclipRatio = &f }},
	"max_results": {kindCount, 10000, "most boxes/lines returned, 0 = all",
		func(p *params, v any) { n := v.(int); p.MaxResults = &n }},
	"cls_thresh": {kindProb, 1, "p(180) above which a line is turned, 0..1",
		func(p *params, v any) { f := v.(float64); p.ClsThresh = &f }},
	"min_score": {kindProb, 1, "lines recognised with a lower score are dropped, 0..1",
		func(p *params, v any) { f := v.(float64); p.MinScore = &f }},
	"use_angle_cls": {kindBool, 0, "run the direction classifier, true/false",
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
	var p params
	var errs []model.FieldError
	for key, val := range raw {
		ptr := "/params/" + escapePointer(key)
		spec, ok := allParams[key]
		if !ok || !contains(accepted, key) {
			msg := fmt.Sprintf("unknown parameter %q for a %s model", key, task)
			if len(accepted) == 0 {
				msg += " (it takes no params)"
			} else {
				msg += " (accepted: " + strings.Join(accepted, ", ") + ")"
			}
			errs = append(errs, model.FieldError{Pointer: ptr, Message: msg})
			continue
		}
		v, err := spec.decode(val)
		if err != nil {
			errs = append(errs, model.FieldError{Pointer: ptr, Message: fmt.Sprintf("%s: %v (%s)", key, err, spec.doc)})
			continue
		}
		spec.set(&p, v)
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Pointer < errs[j].Pointer })
	return p, errs
}

func (s paramSpec) decode(raw json.RawMessage) (any, error) {
	if s.kind == kindBool {
		var b bool
		if err := json.Unmarshal(raw, &b); err != nil {
			return nil, fmt.Errorf("want true or false, got %s", clip(raw))
		}
		return b, nil
	}
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("want a number, got %s", clip(raw))
	}
	switch s.kind {
	case kindProb:
		if f < 0 || f > 1 {
			return nil, fmt.Errorf("%v is out of range", f)
		}
		return f, nil
	case kindPosNum:
		if f <= 0 || f > s.hi {
			return nil, fmt.Errorf("%v is out of range", f)
		}
		return f, nil
	default:
		if f != math.Trunc(f) || f < 0 || f > s.hi {
			return nil, fmt.Errorf("%v is not an integer in 0..%v", f, s.hi)
		}
		return int(f), nil
	}
}

// invalidParams turns FieldErrors met in Prepare (a server that skipped
// ValidateParams) into an item error with the 422 status.
func invalidParams(errs []model.FieldError) error {
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Pointer + ": " + e.Message
	}
	return &model.ItemError{Status: envelope.StatusInvalidRequest, Msg: strings.Join(msgs, "; ")}
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func clip(raw json.RawMessage) string {
	if len(raw) > 40 {
		return string(raw[:40]) + "…"
	}
	return string(raw)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
