package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// Flags that say how to read the others: not keys of a config file.
var notInConfig = []string{"config", "print-config", "help", "version"}

// configSizeLimit bounds a config file: it is read whole.
const configSizeLimit = 1 << 20

// applyConfig sets every flag the YAML file at path names, unless the
// command line set it: flags override the file. The file is a mapping
// from flag names (without the dashes) to values, written as on the
// command line, a list for a flag that takes several (join). A key that
// names no flag is an error, with its line, as is a value a flag refuses.
func applyConfig(f *pflag.FlagSet, path string) error {
	file, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	defer file.Close()
	data, err := io.ReadAll(io.LimitReader(file, configSizeLimit+1))
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	if len(data) > configSizeLimit {
		return fmt.Errorf("--config %s: larger than %d bytes", path, configSizeLimit)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("--config %s: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return nil // empty file
	}
	top := doc.Content[0]
	if top.Kind != yaml.MappingNode {
		return fmt.Errorf("--config %s: line %d: want a mapping of flag names to values", path, top.Line)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		where := fmt.Sprintf("--config %s: line %d", path, k.Line)
		if k.Kind != yaml.ScalarNode {
			return fmt.Errorf("%s: a key must be a flag name", where)
		}
		name := k.Value
		fl := f.Lookup(name)
		if fl == nil || slices.Contains(notInConfig, name) {
			return fmt.Errorf("%s: unknown key %q (keys are fabriqd's flags, as in --help)", where, name)
		}
		if seen[name] {
			return fmt.Errorf("%s: %q given twice", where, name)
		}
		seen[name] = true
		if fl.Changed {
			continue // the command line wins
		}
		if err := setFromYAML(fl, v); err != nil {
			return fmt.Errorf("%s: %s: %w", where, name, err)
		}
	}
	return nil
}

// setFromYAML sets a flag from a YAML scalar, or from a sequence of
// scalars for a flag that takes a list.
func setFromYAML(fl *pflag.Flag, v *yaml.Node) error {
	switch v.Kind {
	case yaml.ScalarNode:
		if sv, ok := fl.Value.(pflag.SliceValue); ok {
			if v.Tag == "!!null" {
				return sv.Replace(nil)
			}
			return sv.Replace([]string{v.Value})
		}
		if v.Tag == "!!null" {
			return fmt.Errorf("no value")
		}
		return fl.Value.Set(v.Value)
	case yaml.SequenceNode:
		sv, ok := fl.Value.(pflag.SliceValue)
		if !ok {
			return fmt.Errorf("takes one value, not a list")
		}
		items := make([]string, 0, len(v.Content))
		for _, it := range v.Content {
			if it.Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: a list of plain values", it.Line)
			}
			items = append(items, it.Value)
		}
		return sv.Replace(items)
	}
	return fmt.Errorf("want a value or a list of values")
}

// printConfig writes the effective configuration, every flag with the
// value it has (from the command line, the file or its default), as a
// config file that --config reads back.
func printConfig(w io.Writer, f *pflag.FlagSet) error {
	top := &yaml.Node{Kind: yaml.MappingNode}
	f.VisitAll(func(fl *pflag.Flag) {
		if slices.Contains(notInConfig, fl.Name) {
			return
		}
		k := &yaml.Node{Kind: yaml.ScalarNode, Value: fl.Name, HeadComment: fl.Usage}
		var v *yaml.Node
		if sv, ok := fl.Value.(pflag.SliceValue); ok {
			v = &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
			for _, s := range sv.GetSlice() {
				v.Content = append(v.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: s, Tag: "!!str"})
			}
		} else {
			v = &yaml.Node{Kind: yaml.ScalarNode, Value: fl.Value.String(), Tag: "!!str"}
			if t := fl.Value.Type(); t == "bool" || t == "int" || t == "uint64" {
				v.Tag = ""
			}
		}
		top.Content = append(top.Content, k, v)
	})
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{top}}); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	_, err := w.Write(buf.Bytes())
	return err
}
