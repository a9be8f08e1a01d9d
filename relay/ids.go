package relay

import "regexp"

// IDRule says what a project or room id may be, in the words errors use.
const IDRule = "1–128 characters from A–Z a–z 0–9 . _ : @ -, starting with a letter or digit"

var idRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$`)

// ValidID reports whether s is a valid project or room id. The policy file,
// the local Room store and the hub's room directory apply the same rule, so
// a room the store accepts is one a policy can name.
func ValidID(s string) bool { return idRE.MatchString(s) }
