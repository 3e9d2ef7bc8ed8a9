package layout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// moduleRoot is the directory of go.mod above this package.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = up
	}
}

// skipDir reports whether the walk leaves a directory out: the lab itself,
// and the directories the go tool ignores (hidden, "_" prefixed).
func skipDir(rel, name string) bool {
	if rel == "." {
		return false
	}
	return rel == "lab" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")
}

// testFile is one _test.go file: where it lives, its text and the string
// literals in it (unquoted).
type testFile struct {
	dir      string // slash-separated, relative to the module root
	text     string
	literals []string
}

// scan returns the module's _test.go files and its testdata/ folders
// (slash-separated, relative to the module root; a testdata/ inside
// another is part of the outer one).
func scan(t *testing.T, root string) ([]testFile, []string) {
	t.Helper()
	var tests []testFile
	var testdata []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if skipDir(rel, d.Name()) {
				return filepath.SkipDir
			}
			if d.Name() == "testdata" {
				testdata = append(testdata, rel)
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		tf := testFile{dir: path.Dir(rel), text: string(src)}
		f, err := parser.ParseFile(fset, rel, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil {
					tf.literals = append(tf.literals, s)
				}
			}
			return true
		})
		tests = append(tests, tf)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tests, testdata
}

// named reports whether a test file names the testdata file at rel (its
// path below testdata/, slash-separated). See TestTestdataIsNamed.
func (tf testFile) named(rel string) bool {
	base := path.Base(rel)
	if strings.Contains(tf.text, base) {
		return true
	}
	for dir := path.Dir(rel); dir != "."; dir = path.Dir(dir) {
		d := path.Base(dir)
		if strings.Contains(tf.text, "testdata/"+d) || strings.Contains(tf.text, strconv.Quote(d)) {
			return true
		}
	}
	for _, lit := range tf.literals {
		p := path.Base(strings.TrimSuffix(lit, "/"))
		if strings.ContainsAny(p, "*?[") {
			if ok, _ := path.Match(p, base); ok {
				return true
			}
		} else if len(p) >= 4 && strings.HasPrefix(base, p) {
			return true
		}
	}
	return false
}

// TestTestdataIsNamed fails on a file under a testdata/ folder that no test
// names. A testdata/ folder holds the fixtures tests open, nothing else:
// run logs, sweep programs and journals go to lab/.
//
// The rule, for a file F under P/testdata/ (P a package directory): some
// _test.go file of P, or a _test.go file elsewhere whose text contains
// "NAME/testdata/" where NAME is P's last element, must
//
//   - contain F's base name anywhere in its text (a path, a table entry, a
//     comment that says why the file is there), or
//   - name a folder between testdata/ and F, as "testdata/DIR" or as the
//     string literal "DIR" (tests that build the name from a table, such
//     as testdata/hosts/NAME.txt), or
//   - hold a string literal whose last path element is a glob matching F's
//     base name, or is at least 4 characters long and a prefix of it
//     ("golden-"+arch, "testdata/x.gguf"+".inp").
//
// Files under testdata/fuzz/ are fuzz corpora, which go test reads itself.
func TestTestdataIsNamed(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	tests, testdata := scan(t, root)
	if len(testdata) == 0 {
		t.Fatal("no testdata/ folder found: is the walk at the module root?")
	}
	var unnamed []string
	for _, td := range testdata {
		pkg := path.Dir(td)
		var namers []testFile
		for _, tf := range tests {
			if tf.dir == pkg || strings.Contains(tf.text, path.Base(pkg)+"/testdata/") {
				namers = append(namers, tf)
			}
		}
		err := filepath.WalkDir(filepath.Join(root, filepath.FromSlash(td)), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, err := filepath.Rel(filepath.Join(root, filepath.FromSlash(td)), p)
			if err != nil {
				return err
			}
			rel = filepath.ToSlash(rel)
			if strings.HasPrefix(rel, "fuzz/") {
				return nil
			}
			for _, tf := range namers {
				if tf.named(rel) {
					return nil
				}
			}
			unnamed = append(unnamed, td+"/"+rel)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(unnamed) > 0 {
		sort.Strings(unnamed)
		t.Errorf("%d file(s) under testdata/ that no test names (open them from a test of their package, or move them to lab/):\n\t%s",
			len(unnamed), strings.Join(unnamed, "\n\t"))
	}
}

// labPath matches a path into the lab folder: "lab/" not preceded by a
// character that would make it part of a longer name ("gitlab/").
var labPath = regexp.MustCompile(`(^|[^A-Za-z0-9_.-])lab/`)

// TestNoLabReferences fails on a Go file outside lab/ that names a path
// under lab/: the lab is a record, and the product must build, test and
// run without it. This package's own files name the folder to fence it and
// are left out.
func TestNoLabReferences(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	self, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if skipDir(rel, d.Name()) || p == self {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(src), "\n") {
			if labPath.MatchString(line) {
				bad = append(bad, rel+":"+strconv.Itoa(i+1)+": "+strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Errorf("Go files outside lab/ that reference it (the product must not read the lab):\n\t%s", strings.Join(bad, "\n\t"))
	}
}
