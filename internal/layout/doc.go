// Package layout holds no code, only tests of the repository's shape that
// the compiler cannot check: what may sit in a testdata/ folder, and that
// the product does not lean on the lab.
//
// Why it exists: experiments leave run logs, sweep programs and journals
// behind, and testdata/ is the handy place to drop them, where they look
// like fixtures a test needs. They belong in the top-level lab/ folder,
// which nothing in the product reads. The tests here keep it that way:
//
//   - TestTestdataIsNamed fails on a file under some package's testdata/
//     that none of that package's tests names (the rule is in its doc
//     comment), listing every such file.
//   - TestNoLabReferences fails on a Go file outside lab/ that names a
//     path under lab/.
package layout
