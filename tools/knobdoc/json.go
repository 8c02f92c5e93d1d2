package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// node is a JSON value that keeps its members' order, so that rewriting a
// few objects of a hand-written file leaves the rest of it byte for byte.
type node struct {
	// delim is '{' for an object, '[' for an array, 0 for a scalar.
	delim   byte
	members []member // an object's
	items   []*node  // an array's
	literal string   // a scalar's JSON text
}

type member struct {
	key string
	val *node
}

// parseJSON reads one JSON document.
func parseJSON(data []byte) (*node, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	n, err := parseNode(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("json: more than one value")
	}
	return n, nil
}

func parseNode(dec *json.Decoder) (*node, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			n := &node{delim: '{'}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key, _ := kt.(string) // the decoder yields only strings as keys
				v, err := parseNode(dec)
				if err != nil {
					return nil, err
				}
				n.members = append(n.members, member{key, v})
			}
			_, err := dec.Token() // '}'
			return n, err
		case '[':
			n := &node{delim: '['}
			for dec.More() {
				v, err := parseNode(dec)
				if err != nil {
					return nil, err
				}
				n.items = append(n.items, v)
			}
			_, err := dec.Token() // ']'
			return n, err
		}
		return nil, fmt.Errorf("json: unexpected %v", t)
	default:
		return scalar(t), nil
	}
}

// scalar is the node of a string, json.Number, number, bool or nil.
func scalar(v any) *node {
	if n, ok := v.(json.Number); ok {
		return &node{literal: n.String()}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // strings, numbers, bools and nil always encode
	return &node{literal: strings.TrimSuffix(b.String(), "\n")}
}

// object builds an object from key, value pairs; a value that is not a
// *node is a scalar.
func object(kv ...any) *node {
	n := &node{delim: '{'}
	for i := 0; i+1 < len(kv); i += 2 {
		n.members = append(n.members, member{kv[i].(string), toNode(kv[i+1])})
	}
	return n
}

// array builds an array; an item that is not a *node is a scalar.
func array(items ...any) *node {
	n := &node{delim: '['}
	for _, it := range items {
		n.items = append(n.items, toNode(it))
	}
	return n
}

func toNode(v any) *node {
	if n, ok := v.(*node); ok {
		return n
	}
	return scalar(v)
}

// get returns the member key of an object, or nil.
func (n *node) get(key string) *node {
	if n == nil || n.delim != '{' {
		return nil
	}
	for _, m := range n.members {
		if m.key == key {
			return m.val
		}
	}
	return nil
}

// path follows object keys from n.
func (n *node) path(keys ...string) (*node, error) {
	at := n
	for i, k := range keys {
		at = at.get(k)
		if at == nil {
			return nil, fmt.Errorf("no object at %s", strings.Join(keys[:i+1], "."))
		}
	}
	if at.delim != '{' {
		return nil, fmt.Errorf("%s is not an object", strings.Join(keys, "."))
	}
	return at, nil
}

// set replaces the member key of an object, or adds it: first when first,
// else last.
func (n *node) set(key string, v *node, first bool) {
	for i, m := range n.members {
		if m.key == key {
			n.members[i].val = v
			return
		}
	}
	if first {
		n.members = append([]member{{key, v}}, n.members...)
		return
	}
	n.members = append(n.members, member{key, v})
}

// encode writes n as json.MarshalIndent(v, "", "  ") does, with no HTML
// escaping, and a final newline.
func (n *node) encode() []byte {
	var b bytes.Buffer
	n.write(&b, "")
	b.WriteByte('\n')
	return b.Bytes()
}

func (n *node) write(b *bytes.Buffer, indent string) {
	inner := indent + "  "
	switch n.delim {
	case '{':
		if len(n.members) == 0 {
			b.WriteString("{}")
			return
		}
		b.WriteString("{\n")
		for i, m := range n.members {
			b.WriteString(inner)
			b.WriteString(scalar(m.key).literal)
			b.WriteString(": ")
			m.val.write(b, inner)
			if i < len(n.members)-1 {
				b.WriteByte(',')
			}
			b.WriteByte('\n')
		}
		b.WriteString(indent + "}")
	case '[':
		if len(n.items) == 0 {
			b.WriteString("[]")
			return
		}
		b.WriteString("[\n")
		for i, it := range n.items {
			b.WriteString(inner)
			it.write(b, inner)
			if i < len(n.items)-1 {
				b.WriteByte(',')
			}
			b.WriteByte('\n')
		}
		b.WriteString(indent + "]")
	default:
		b.WriteString(n.literal)
	}
}
