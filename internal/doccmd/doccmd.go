// Package doccmd pulls the shell commands out of a Markdown document, so a
// test can run what a README or manual tells a reader to type and prove that
// it works as written.
//
// A block is a fenced code block (``` or ~~~) whose info string names the
// language ("sh", "bash", "console", …). A command is one logical line of a
// block: lines ending in a backslash are joined, blank lines and
// comment-only lines are dropped, and a trailing "# comment" (a # that
// starts a word outside quotes, as the shell reads it) is split off so the
// test can both run the command and read what the doc says about it.
package doccmd

import (
	"bufio"
	"bytes"
	"strings"
)

// Block is one fenced code block.
type Block struct {
	Lang    string // first word of the info string ("sh"), "" for none
	Line    int    // 1-based line of the first line inside the fence
	Heading string // text of the nearest heading above the block, "" for none
	Text    string // the block's lines, each ending in "\n"
}

// Command is one logical shell line of a block.
type Command struct {
	Line       int    // 1-based line in the document where the command starts
	Text       string // the command, continuations joined with one space, without the trailing comment
	Comment    string // the trailing comment without "#" and surrounding space, "" for none
	Background bool   // the command ends in a single "&" (the shell runs it in the background)
}

// Blocks returns the fenced code blocks of doc whose language is one of
// langs, in order (every block when langs is empty). An unclosed fence runs
// to the end of the document, as CommonMark reads it.
func Blocks(doc []byte, langs ...string) []Block {
	var out []Block
	var cur *Block
	var fence string
	var body strings.Builder
	heading := ""
	sc := bufio.NewScanner(bytes.NewReader(doc))
	sc.Buffer(make([]byte, 64*1024), 1<<24)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " ")
		indent := len(line) - len(trimmed)
		if cur != nil {
			if indent < 4 && isClosingFence(trimmed, fence) {
				cur.Text = body.String()
				if wanted(cur.Lang, langs) {
					out = append(out, *cur)
				}
				cur = nil
				continue
			}
			body.WriteString(line)
			body.WriteByte('\n')
			continue
		}
		if indent >= 4 {
			continue
		}
		if f, info, ok := openingFence(trimmed); ok {
			lang, _, _ := strings.Cut(strings.TrimSpace(info), " ")
			lang = strings.TrimPrefix(strings.TrimSuffix(strings.TrimPrefix(lang, "{"), "}"), ".")
			cur = &Block{Lang: lang, Line: n + 1, Heading: heading}
			fence = f
			body.Reset()
			continue
		}
		if h, ok := headingText(trimmed); ok {
			heading = h
		}
	}
	if cur != nil {
		cur.Text = body.String()
		if wanted(cur.Lang, langs) {
			out = append(out, *cur)
		}
	}
	return out
}

func wanted(lang string, langs []string) bool {
	if len(langs) == 0 {
		return true
	}
	for _, l := range langs {
		if strings.EqualFold(l, lang) {
			return true
		}
	}
	return false
}

// openingFence reports whether line opens a fence: three or more backticks
// (whose info string has no backtick) or tildes.
func openingFence(line string) (fence, info string, ok bool) {
	if line == "" || (line[0] != '`' && line[0] != '~') {
		return "", "", false
	}
	c := line[0]
	n := 0
	for n < len(line) && line[n] == c {
		n++
	}
	if n < 3 {
		return "", "", false
	}
	info = line[n:]
	if c == '`' && strings.ContainsRune(info, '`') {
		return "", "", false
	}
	return line[:n], info, true
}

// isClosingFence reports whether line closes fence: the same character, at
// least as many, and nothing after it but spaces.
func isClosingFence(line, fence string) bool {
	c := fence[0]
	n := 0
	for n < len(line) && line[n] == c {
		n++
	}
	return n >= len(fence) && strings.TrimSpace(line[n:]) == ""
}

// headingText returns an ATX heading's text ("## A short tour" → "A short tour").
func headingText(line string) (string, bool) {
	n := 0
	for n < len(line) && line[n] == '#' {
		n++
	}
	if n == 0 || n > 6 || (n < len(line) && line[n] != ' ' && line[n] != '\t') {
		return "", false
	}
	return strings.TrimSpace(strings.TrimRight(strings.TrimSpace(line[n:]), "#")), true
}

// Commands splits a block into its commands. Lines of a block that starts
// with "$ " prompts (a console transcript) yield only the prompted lines.
func (b Block) Commands() []Command {
	lines := strings.Split(strings.TrimSuffix(b.Text, "\n"), "\n")
	prompted := false
	for _, l := range lines {
		if strings.HasPrefix(l, "$ ") {
			prompted = true
			break
		}
	}
	var out []Command
	var parts []string
	start := 0
	for i, l := range lines {
		if len(parts) == 0 {
			if prompted {
				if !strings.HasPrefix(l, "$ ") {
					continue
				}
				l = l[2:]
			}
			start = b.Line + i
		}
		code, comment := splitComment(l)
		if cont, ok := strings.CutSuffix(strings.TrimRight(code, " \t"), `\`); ok && comment == "" {
			parts = append(parts, strings.TrimSpace(cont))
			continue
		}
		parts = append(parts, strings.TrimSpace(code))
		text := strings.TrimSpace(strings.Join(parts, " "))
		parts = parts[:0]
		if text == "" {
			continue
		}
		c := Command{Line: start, Text: text, Comment: comment}
		if strings.HasSuffix(text, "&") && !strings.HasSuffix(text, "&&") {
			c.Background = true
		}
		out = append(out, c)
	}
	if text := strings.TrimSpace(strings.Join(parts, " ")); text != "" {
		out = append(out, Command{Line: start, Text: text})
	}
	return out
}

// splitComment splits a shell line at its comment: a # that starts a word
// outside single and double quotes and not escaped by a backslash.
func splitComment(line string) (code, comment string) {
	var quote byte
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote == '\'':
			if c == '\'' {
				quote = 0
			}
		case c == '\\':
			i++ // the next byte is literal (also inside double quotes, near enough for a doc)
		case quote == '"':
			if c == '"' {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return line[:i], strings.TrimSpace(line[i+1:])
		}
	}
	return line, ""
}

// Commands returns the commands of every block of doc in langs, in order.
func Commands(doc []byte, langs ...string) []Command {
	var out []Command
	for _, b := range Blocks(doc, langs...) {
		out = append(out, b.Commands()...)
	}
	return out
}
