package clustercfg

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"

	yaml "go.yaml.in/yaml/v3"
)

// aliasBudget is how many nodes a document may expand to beyond its own
// size through aliases.
const aliasBudget = 1 << 20

// decodeConfig reads data into a Config without cross-field checks;
// lines places every YAML path found. With errors (a non-nil Errors)
// the Config is what could be read, for validation to find the rest; a
// syntax error gives no Config.
func decodeConfig(file string, data []byte) (*Config, map[string]int, Errors) {
	root, err := parseDocument(file, data)
	if err != nil {
		return nil, nil, err.(Errors)
	}
	c := &Config{}
	d := newDecoder(file, countNodes(root)+aliasBudget)
	if root != nil {
		d.decode(root, reflect.ValueOf(c).Elem(), "")
	}
	if d.spent {
		return nil, nil, d.errs // what was read is not worth checking
	}
	return c, d.lines, d.errs
}

func marshal(c *Config) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(c); err != nil {
		return nil, fmt.Errorf("clustercfg: marshal: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("clustercfg: marshal: %w", err)
	}
	return b.Bytes(), nil
}

// section is one named list of the configuration, for ApplyOp.
type section struct {
	list func(c *Config) reflect.Value // addressable slice
	key  string                        // the field naming an item
}

var sections = map[string]section{
	"cluster":  {func(c *Config) reflect.Value { return reflect.ValueOf(&c.Clusters).Elem() }, "Name"},
	"node":     {func(c *Config) reflect.Value { return reflect.ValueOf(&c.Nodes).Elem() }, "Name"},
	"director": {func(c *Config) reflect.Value { return reflect.ValueOf(&c.Directors).Elem() }, "Name"},
	"service":  {func(c *Config) reflect.Value { return reflect.ValueOf(&c.Services).Elem() }, "Name"},
	"domain":   {func(c *Config) reflect.Value { return reflect.ValueOf(&c.Domains).Elem() }, "Name"},
	"qos":      {func(c *Config) reflect.Value { return reflect.ValueOf(&c.QoS).Elem() }, "Name"},
	"layout":   {func(c *Config) reflect.Value { return reflect.ValueOf(&c.FileSystem.Layouts).Elem() }, "Path"},
	"account":  {func(c *Config) reflect.Value { return reflect.ValueOf(&c.Accounts).Elem() }, "Name"},
}

// kindFeedback is the one item that is not in a list: the feedback
// section, put whole or deleted, named "feedback".
const kindFeedback = "feedback"

func sectionNames() []string {
	out := make([]string, 0, len(sections)+1)
	for k := range sections {
		out = append(out, k)
	}
	out = append(out, kindFeedback)
	slices.Sort(out)
	return out
}

// decodeItem decodes one put's value (JSON or YAML) into item.
func decodeItem(kind string, value []byte, item reflect.Value) error {
	if len(value) == 0 {
		return fmt.Errorf("put %s: no value", kind)
	}
	root, err := parseDocument("value", value)
	if err != nil {
		return fmt.Errorf("put %s: %w", kind, err)
	}
	if root == nil {
		return fmt.Errorf("put %s: empty value", kind)
	}
	d := newDecoder("value", countNodes(root)+aliasBudget)
	d.decode(root, item, kind)
	if len(d.errs) > 0 {
		sortErrors(d.errs)
		return fmt.Errorf("put %s: %w", kind, d.errs)
	}
	return nil
}

// applyFeedbackOp puts or deletes the feedback section.
func applyFeedbackOp(c *Config, op, name string, value []byte) error {
	if name != "" && name != kindFeedback {
		return fmt.Errorf("%s feedback: name %q: the section is one, named %q", op, name, kindFeedback)
	}
	switch op {
	case "put":
		var f Feedback
		if err := decodeItem(kindFeedback, value, reflect.ValueOf(&f).Elem()); err != nil {
			return err
		}
		c.Feedback = &f
		return nil
	case "delete":
		if c.Feedback == nil {
			return errors.New("delete feedback: the configuration has no feedback section")
		}
		c.Feedback = nil
		return nil
	}
	return fmt.Errorf("unknown op %q (want put or delete)", op)
}

func applyOp(c *Config, op, kind, name string, value []byte) error {
	if kind == kindFeedback {
		return applyFeedbackOp(c, op, name, value)
	}
	sec, ok := sections[kind]
	if !ok {
		return fmt.Errorf("unknown kind %q (want %s)", kind, orList(sectionNames()))
	}
	list := sec.list(c)
	find := func(n string) int {
		for i := 0; i < list.Len(); i++ {
			if list.Index(i).FieldByName(sec.key).String() == n {
				return i
			}
		}
		return -1
	}
	what := "name"
	if sec.key == "Path" {
		what = "path"
	}
	switch op {
	case "put":
		item := reflect.New(list.Type().Elem()).Elem()
		if err := decodeItem(kind, value, item); err != nil {
			return err
		}
		n := item.FieldByName(sec.key).String()
		if n == "" {
			return fmt.Errorf("put %s: the value has no %s", kind, what)
		}
		if name != "" && name != n {
			return fmt.Errorf("put %s: name %q but the value's %s is %q", kind, name, what, n)
		}
		if i := find(n); i >= 0 {
			list.Index(i).Set(item)
		} else {
			list.Set(reflect.Append(list, item))
		}
		return nil
	case "delete":
		if name == "" {
			return fmt.Errorf("delete %s: no %s given", kind, what)
		}
		i := find(name)
		if i < 0 {
			return fmt.Errorf("delete %s: no %s with %s %q", kind, kind, what, name)
		}
		n := reflect.MakeSlice(list.Type(), 0, list.Len()-1)
		n = reflect.AppendSlice(n, list.Slice(0, i))
		n = reflect.AppendSlice(n, list.Slice(i+1, list.Len()))
		if n.Len() == 0 {
			n = reflect.Zero(list.Type()) // nil, as Parse gives
		}
		list.Set(n)
		return nil
	}
	return fmt.Errorf("unknown op %q (want put or delete)", op)
}
