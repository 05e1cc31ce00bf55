package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Catalog is every model server of a deployment, built from the model-server
// files of one directory. It is immutable once built.
type Catalog struct {
	Dir     string
	Entries []*Entry // sorted by ID
}

// Entry is one model server of the catalog.
type Entry struct {
	ID       string // section name
	Name     string // the model TOML's name, else ID
	Category string // the model TOML's category, else its type
	URI      string // server_uri
	Host     string
	Port     int
	Config   *Server // as read from the file, without environment overrides
}

// LoadCatalog reads every *.toml file in dir as a model-server file. A file
// that does not parse or validate, or a duplicate id, port or server_uri,
// stops the build with the reason naming both files.
func LoadCatalog(dir string) (*Catalog, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	names, err := filepath.Glob(filepath.Join(abs, "*.toml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	if len(names) == 0 {
		return nil, fmt.Errorf("catalog %s: no model-server files (*.toml)", abs)
	}
	c := &Catalog{Dir: abs}
	var errs []error
	byID, byPort, byURI := map[string]*Entry{}, map[int]*Entry{}, map[string]*Entry{}
	for _, name := range names {
		if fi, err := os.Stat(name); err != nil || fi.IsDir() {
			continue
		}
		s, err := readServer(name)
		if err == nil {
			err = s.Validate()
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		e := &Entry{ID: s.ID, Name: s.ModelName, Category: s.ModelCategory, URI: s.ServerURI, Host: s.Host, Port: *s.Port, Config: s}
		if e.Name == "" {
			e.Name = e.ID
		}
		if e.Category == "" {
			e.Category = s.ModelType
		}
		if e.Port == 0 {
			errs = append(errs, fmt.Errorf("%s: [%s] port must be set to a fixed port for the catalog (0 picks a random one)", name, e.ID))
			continue
		}
		if o := byID[e.ID]; o != nil {
			errs = append(errs, fmt.Errorf("duplicate catalog id [%s] in %s and %s", e.ID, o.Config.File, name))
			continue
		}
		if o := byPort[e.Port]; o != nil {
			errs = append(errs, fmt.Errorf("duplicate port %d: [%s] in %s and [%s] in %s", e.Port, o.ID, o.Config.File, e.ID, name))
			continue
		}
		if o := byURI[e.URI]; o != nil {
			errs = append(errs, fmt.Errorf("duplicate server_uri %s: [%s] in %s and [%s] in %s", e.URI, o.ID, o.Config.File, e.ID, name))
			continue
		}
		if strings.HasPrefix(e.URI, "/v1/models/") {
			errs = append(errs, fmt.Errorf("%s: [%s] server_uri %s collides with the gateway's /v1/models/ routes", name, e.ID, e.URI))
			continue
		}
		byID[e.ID], byPort[e.Port], byURI[e.URI] = e, e, e
		c.Entries = append(c.Entries, e)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("catalog %s: %w", abs, errors.Join(errs...))
	}
	sort.Slice(c.Entries, func(i, j int) bool { return c.Entries[i].ID < c.Entries[j].ID })
	return c, nil
}

// ByID returns the entry of a catalog id, or nil.
func (c *Catalog) ByID(id string) *Entry {
	for _, e := range c.Entries {
		if e.ID == id {
			return e
		}
	}
	return nil
}

// ByURI returns the entry serving a server_uri, or nil.
func (c *Catalog) ByURI(uri string) *Entry {
	for _, e := range c.Entries {
		if e.URI == uri {
			return e
		}
	}
	return nil
}

// IDs lists the catalog ids, sorted.
func (c *Catalog) IDs() []string {
	out := make([]string, len(c.Entries))
	for i, e := range c.Entries {
		out[i] = e.ID
	}
	return out
}
