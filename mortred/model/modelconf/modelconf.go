// Package modelconf holds what every model type's TOML and params share:
// strict decoding (an unknown key stops the server instead of being
// ignored), the model store path rule, and request params checked against a
// per-model list (an unknown or bad key is one FieldError with its JSON
// pointer, which the server answers 422).
package modelconf

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/fe64bb06/frontdoor/mortred/deps"
	"github.com/fe64bb06/frontdoor/mortred/envelope"
	"github.com/fe64bb06/frontdoor/mortred/model"
	"github.com/fe64bb06/frontdoor/mortred/model/imageio"
	"github.com/fe64bb06/frontdoor/mortred/model/ort"
)

// Files resolves a model TOML's file keys by the path rule: absolute paths
// as they are; else relative to the model store (see Head).
type Files struct {
	Dir   string // the TOML file's absolute directory
	Store string
}

// Path resolves one file key.
func (f Files) Path(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(f.Store, p)
}

// Decode decodes the TOML at path into v, refusing unknown keys, and
// returns the file's absolute directory.
func Decode(path string, v any) (string, error) {
	if path == "" {
		return "", errors.New("this model type needs a model TOML (model_config_file_path)")
	}
	md, err := toml.DecodeFile(path, v)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("model config %s not found: check model_config_file_path", path)
		}
		return "", fmt.Errorf("model config %s: %v", path, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		return "", fmt.Errorf("model config %s: unknown keys %s", path, strings.Join(keys, ", "))
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	return filepath.Dir(abs), nil
}

// Headed is a model type's config struct: one that embeds Head.
type Headed interface{ head() *Head }

// Load decodes the TOML at path into v (refusing unknown keys), resolves
// the path rule for its files and defaults max_pixels.
func Load(path string, v Headed) error {
	dir, err := Decode(path, v)
	if err != nil {
		return err
	}
	h := v.head()
	h.files = Files{Dir: dir, Store: dir}
	if h.ModelDir != "" {
		configured := h.ModelDir
		if !filepath.IsAbs(configured) {
			configured = filepath.Join(dir, configured)
		}
		probe := h.ModelFile
		if filepath.IsAbs(probe) {
			probe = ""
		}
		store, err := deps.Default().ModelStore(probe, configured, "model_dir in "+path)
		if err != nil {
			return fmt.Errorf("model config %s: %w", path, ort.Missing(err))
		}
		h.files.Store = store
	}
	if h.MaxPixels == 0 {
		h.MaxPixels = imageio.DefaultMaxPixels
	}
	if h.MaxPixels < 0 {
		return fmt.Errorf("model config %s: max_pixels %d: must be ≥ 0", path, h.MaxPixels)
	}
	return nil
}

// Head is the keys every model TOML starts with (embedded in each type's
// config struct).
//
// Path rule (the same comment heads each conf/models file): model_file and
// the other file keys are used as is when absolute; else they are relative
// to the model store. With a model_dir key the store is found by package
// deps: MORTRED_MODEL_DIR when set, else model_dir (relative to the TOML
// file's directory) when it holds model_file, else .deps/models beside the
// working directory, else beside the binary's directory. With no model_dir
// key the paths are relative to the TOML file's directory and
// MORTRED_MODEL_DIR does not apply.
type Head struct {
	Type    string `toml:"type"`
	Name    string `toml:"name"`
	Version string `toml:"version"`
	// Category is read by the server's catalog (default: the type).
	Category string `toml:"category"`
	// ModelDir is the model store; see the path rule above.
	ModelDir  string `toml:"model_dir"`
	ModelFile string `toml:"model_file"`
	// MaxPixels bounds width × height of a request image, checked before
	// decoding; 0 means imageio.DefaultMaxPixels.
	MaxPixels int `toml:"max_pixels"`

	files Files
}

func (h *Head) head() *Head { return h }

// Path resolves a file key by the path rule (valid after Load).
func (h *Head) Path(p string) string { return h.files.Path(p) }

// Dir is the TOML file's absolute directory (valid after Load).
func (h *Head) Dir() string { return h.files.Dir }

// Session opens the model file's ONNX Runtime session with the server's
// thread setting (ort.Init must have run).
func (h *Head) Session(opts model.Options, input string, outputs ...string) (*ort.Session, error) {
	return ort.NewSession(ort.Config{ModelPath: h.Path(h.ModelFile), Inputs: []string{input},
		Outputs: outputs, IntraOpThreads: opts.IntraOpThreads})
}

// Open is how a model type of this kind starts: ONNX Runtime loaded, the
// TOML at path read and checked by load, and the session of its model
// file on the tensors tensors(cfg) names (the input, then the outputs).
func Open[C Headed](path string, opts model.Options, load func(string) (C, error), tensors func(C) []string) (C, *ort.Session, error) {
	var none C
	if err := ort.Init(opts.ORTLib); err != nil {
		return none, nil, err
	}
	cfg, err := load(path)
	if err != nil {
		return none, nil, err
	}
	names := tensors(cfg)
	sess, err := cfg.head().Session(opts, names[0], names[1:]...)
	if err != nil {
		return none, nil, err
	}
	return cfg, sess, nil
}

// WarmUp ends a model's start: a failed warm-up run (err, the run's
// error) closes sess and says which model file failed, so a wrong TOML
// stops the server at start instead of failing every request.
func (h *Head) WarmUp(sess *ort.Session, err error) error {
	if err == nil {
		return nil
	}
	sess.Close()
	return fmt.Errorf("model %s: warm-up run: %v", h.ModelFile, err)
}

// Info is the model.Info of a model of this task; the name defaults to the
// task.
func (h *Head) Info(task string) model.Info {
	name := h.Name
	if name == "" {
		name = task
	}
	return model.Info{Name: name, Version: h.Version, Task: task}
}

// Decode is the common start of a Prepare: the params checked against
// accepted (an error is the 422 item error) and the image decoded within
// max_pixels.
func (h *Head) Decode(task string, accepted []Param, raw map[string]json.RawMessage, image []byte) (Values, *imageio.RGB, error) {
	vals, errs := Parse(task, accepted, raw)
	if errs != nil {
		return nil, nil, Invalid(errs)
	}
	img, err := imageio.Decode(image, h.MaxPixels)
	if err != nil {
		return nil, nil, err
	}
	return vals, img, nil
}

// Kind is a param's value type.
type Kind int

const (
	Prob   Kind = iota // number in [0, 1]
	PosNum             // number in (0, Max]
	Count              // integer in [Min, Max]
	Bool               // true or false
)

// Param is one accepted request param.
type Param struct {
	Key      string
	Kind     Kind
	Min, Max float64
	Doc      string
}

// Values are the parsed params by key: float64 for Prob and PosNum, int for
// Count, bool for Bool.
type Values map[string]any

// Float returns key's value, or def when the request did not set it.
func (v Values) Float(key string, def float64) float64 {
	if x, ok := v[key].(float64); ok {
		return x
	}
	return def
}

// Int returns key's value, or def when the request did not set it.
func (v Values) Int(key string, def int) int {
	if x, ok := v[key].(int); ok {
		return x
	}
	return def
}

// Bool returns key's value, or def when the request did not set it.
func (v Values) Bool(key string, def bool) bool {
	if x, ok := v[key].(bool); ok {
		return x
	}
	return def
}

// Parse checks every key of raw against accepted; it returns the values, or
// one FieldError per bad key, sorted by pointer.
func Parse(task string, accepted []Param, raw map[string]json.RawMessage) (Values, []model.FieldError) {
	vals := Values{}
	var errs []model.FieldError
	for key, val := range raw {
		ptr := "/params/" + strings.ReplaceAll(strings.ReplaceAll(key, "~", "~0"), "/", "~1")
		p, ok := find(accepted, key)
		if !ok {
			keys := Keys(accepted)
			msg := fmt.Sprintf("unknown parameter %q for a %s model", key, task)
			if len(keys) == 0 {
				msg += " (it takes no params)"
			} else {
				msg += " (accepted: " + strings.Join(keys, ", ") + ")"
			}
			errs = append(errs, model.FieldError{Pointer: ptr, Message: msg})
			continue
		}
		v, err := p.decode(val)
		if err != nil {
			errs = append(errs, model.FieldError{Pointer: ptr, Message: fmt.Sprintf("%s: %v (%s)", key, err, p.Doc)})
			continue
		}
		vals[key] = v
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Pointer < errs[j].Pointer })
	return vals, errs
}

// Keys are the keys of ps, in order.
func Keys(ps []Param) []string {
	keys := make([]string, len(ps))
	for i, p := range ps {
		keys[i] = p.Key
	}
	return keys
}

func find(ps []Param, key string) (Param, bool) {
	for _, p := range ps {
		if p.Key == key {
			return p, true
		}
	}
	return Param{}, false
}

func (p Param) decode(raw json.RawMessage) (any, error) {
	// json.Unmarshal takes null as "leave unchanged": a key set to null
	// would pass as 0 or false.
	if strings.TrimSpace(string(raw)) == "null" {
		if p.Kind == Bool {
			return nil, errors.New("want true or false, got null")
		}
		return nil, errors.New("want a number, got null")
	}
	if p.Kind == Bool {
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
	switch p.Kind {
	case Prob:
		if f < 0 || f > 1 {
			return nil, fmt.Errorf("%v is out of range", f)
		}
		return f, nil
	case PosNum:
		if f <= 0 || f > p.Max {
			return nil, fmt.Errorf("%v is out of range", f)
		}
		return f, nil
	}
	if f != math.Trunc(f) || f < p.Min || f > p.Max {
		return nil, fmt.Errorf("%v is not an integer in %v..%v", f, p.Min, p.Max)
	}
	return int(f), nil
}

func clip(raw json.RawMessage) string {
	if len(raw) > 40 {
		return string(raw[:40]) + "…"
	}
	return string(raw)
}

// Invalid turns FieldErrors met in Prepare (a server that skipped
// ValidateParams) into an item error with the 422 status.
func Invalid(errs []model.FieldError) error {
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Pointer + ": " + e.Message
	}
	return &model.ItemError{Status: envelope.StatusInvalidRequest, Msg: strings.Join(msgs, "; ")}
}

// Each runs fn on every item of a batch, in order: for models whose graph
// takes one image per run. An item of another type, or an error from fn,
// fails the whole batch (a session-level failure, as model.Model.Run says).
func Each[T any](task string, batch []model.Input, fn func(T) (any, error)) ([]model.Result, error) {
	out := make([]model.Result, len(batch))
	for i, in := range batch {
		it, ok := in.(T)
		if !ok {
			return nil, fmt.Errorf("%s: item %d was not prepared by this model (%T)", task, i, in)
		}
		data, err := fn(it)
		if err != nil {
			return nil, err
		}
		out[i] = model.Result{Data: data}
	}
	return out, nil
}

// Common implements the model.Model methods that every model type of this
// kind writes the same way; a Model embeds it.
type Common struct {
	task   string
	params []Param
	head   *Head
}

// NewCommon is the Common of a task with its accepted params and config head.
func NewCommon(task string, params []Param, h *Head) Common {
	return Common{task: task, params: params, head: h}
}

// Info implements model.Model.
func (c Common) Info() model.Info { return c.head.Info(c.task) }

// ValidateParams implements model.Model.
func (c Common) ValidateParams(p map[string]json.RawMessage) []model.FieldError {
	_, errs := Parse(c.task, c.params, p)
	return errs
}

// Decode is the start of Prepare: the params and the decoded image.
func (c Common) Decode(p map[string]json.RawMessage, image []byte) (Values, *imageio.RGB, error) {
	return c.head.Decode(c.task, c.params, p, image)
}
