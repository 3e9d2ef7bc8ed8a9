package grammar

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Numeric bounds (minimum, maximum, exclusiveMinimum, exclusiveMaximum)
// become digit patterns: the integers of a range are the union of
// same-length ranges, each a few digit classes. A number's grammar under
// bounds is a subset of what the schema allows, never more: whole numbers
// in range, and decimals whose whole part keeps every decimal in range,
// without exponents.

// maxMagnitude is the largest whole part the JSON rules write (16 digits).
const maxMagnitude = 1e16 - 1

// numBounds reads a schema's numeric bounds as the whole numbers a value
// may lie between: lo, hi for integers, and the exact bounds flo, fhi
// (±maxMagnitude where absent). ok is false when there are none.
func numBounds(o *object, path string) (lo, hi int64, flo, fhi float64, ok bool, err error) {
	flo, fhi = -maxMagnitude, maxMagnitude
	lo, hi = -maxMagnitude, maxMagnitude
	read := func(k string) (float64, bool, error) {
		v, present := o.get(k)
		if !present {
			return 0, false, nil
		}
		n, isNum := v.(json.Number)
		f, perr := strconv.ParseFloat(string(n), 64)
		if !isNum || perr != nil || math.IsInf(f, 0) {
			return 0, false, &SchemaError{path + "/" + k, k + " must be a number"}
		}
		return f, true, nil
	}
	for _, b := range []struct {
		k         string
		low, excl bool
	}{{"minimum", true, false}, {"exclusiveMinimum", true, true}, {"maximum", false, false}, {"exclusiveMaximum", false, true}} {
		f, present, rerr := read(b.k)
		if rerr != nil {
			return 0, 0, 0, 0, false, rerr
		}
		if !present {
			continue
		}
		ok = true
		f = max(min(f, maxMagnitude+1), -maxMagnitude-1)
		if b.low {
			w := math.Ceil(f)
			if b.excl && w == f {
				w++
			}
			lo = max(lo, int64(w))
			flo = max(flo, f)
		} else {
			w := math.Floor(f)
			if b.excl && w == f {
				w--
			}
			hi = min(hi, int64(w))
			fhi = min(fhi, f)
		}
	}
	lo, hi = max(lo, -maxMagnitude), min(hi, maxMagnitude)
	return lo, hi, flo, fhi, ok, nil
}

// intRange is a GBNF expression for the integers in [lo, hi] ("" when
// there are none).
func intRange(lo, hi int64) string {
	if lo > hi {
		return ""
	}
	var alts []string
	if lo < 0 {
		for _, a := range natRange(max(1, -hi), -lo) {
			alts = append(alts, `"-" `+a)
		}
	}
	if hi >= 0 {
		alts = append(alts, natRange(max(lo, 0), hi)...)
	}
	return "( " + strings.Join(alts, " | ") + " )"
}

// natRange lists expressions that together match the naturals in [a, b]
// (0 <= a <= b), written without leading zeros.
func natRange(a, b int64) []string {
	var out []string
	for n, p := 1, int64(1); a <= b; n, p = n+1, p*10 {
		top := p*10 - 1 // the largest n-digit number
		if a > top {
			continue
		}
		hi := min(b, top)
		out = append(out, sameLength(strconv.FormatInt(a, 10), strconv.FormatInt(hi, 10))...)
		a = top + 1
	}
	return out
}

// sameLength matches the numbers from x to y, both of one length.
func sameLength(x, y string) []string {
	n := len(x)
	switch {
	case x == y:
		return []string{literal(x)}
	case strings.Trim(x[1:], "0") == "" && strings.Trim(y[1:], "9") == "":
		return []string{fmt.Sprintf("[%c-%c]%s", x[0], y[0], anyDigits(n-1))}
	case x[0] == y[0]:
		var out []string
		for _, rest := range sameLength(x[1:], y[1:]) {
			out = append(out, literal(x[:1])+" "+rest)
		}
		return out
	}
	var out []string
	for _, rest := range sameLength(x[1:], strings.Repeat("9", n-1)) {
		out = append(out, literal(x[:1])+" "+rest)
	}
	if y[0]-x[0] > 1 {
		out = append(out, fmt.Sprintf("[%c-%c]%s", x[0]+1, y[0]-1, anyDigits(n-1)))
	}
	for _, rest := range sameLength(strings.Repeat("0", n-1), y[1:]) {
		out = append(out, literal(y[:1])+" "+rest)
	}
	return out
}

func anyDigits(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" [0-9]{%d}", n)
}

// numRange is a GBNF expression for numbers within the bounds: the
// integers in [lo, hi]; decimals I.f >= 0 with lo <= I and I+1 <= fhi;
// decimals -I.f with -I <= hi and -(I+1) >= flo.
func numRange(lo, hi int64, flo, fhi float64) string {
	var alts []string
	if e := intRange(lo, hi); e != "" {
		alts = append(alts, e)
	}
	frac := ` "." [0-9]{1,16}`
	if pa, pb := max(lo, 0), int64(math.Floor(fhi))-1; pa <= pb {
		alts = append(alts, intRange(pa, pb)+frac)
	}
	if na, nb := max(-hi, 0), -int64(math.Ceil(flo))-1; na <= nb {
		alts = append(alts, `"-" `+intRange(na, nb)+frac)
	}
	if len(alts) == 0 {
		return ""
	}
	return "( " + strings.Join(alts, " | ") + " )"
}
