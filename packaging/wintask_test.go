package packaging

import (
	"encoding/xml"
	"slices"
	"strings"
	"testing"
	"unicode/utf16"
)

// spacey is the logon task of an install under paths with spaces, quotes
// and XML specials, as a per-user install under "Program Files" or a user
// name with a space produces.
var spacey = TaskParams{
	Exec:   `C:\Users\Ann Lee\AppData\Local\Programs\roomrelay\roomrelay.exe`,
	Args:   []string{"run", "--home", `C:\Users\Ann Lee\Rooms & "Co" \`},
	UserID: `DESKTOP-1\Ann Lee`,
}

func TestWindowsTaskGolden(t *testing.T) {
	for name, p := range map[string]TaskParams{
		"wintask":      {Exec: `C:\Users\ann\AppData\Local\Programs\roomrelay\roomrelay.exe`, Args: []string{"run"}, UserID: `DESKTOP-1\ann`},
		"wintask-home": spacey,
	} {
		t.Run(name, func(t *testing.T) {
			got, err := WindowsLogonTask(p)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, name, got)
		})
	}
}

// taskXML is the part of a task definition the tests read back.
type taskXML struct {
	XMLName  xml.Name `xml:"http://schemas.microsoft.com/windows/2004/02/mit/task Task"`
	URI      string   `xml:"RegistrationInfo>URI"`
	Logon    []string `xml:"Triggers>LogonTrigger>UserId"`
	User     string   `xml:"Principals>Principal>UserId"`
	Type     string   `xml:"Principals>Principal>LogonType"`
	Level    string   `xml:"Principals>Principal>RunLevel"`
	Limit    string   `xml:"Settings>ExecutionTimeLimit"`
	Battery  string   `xml:"Settings>StopIfGoingOnBatteries"`
	Command  string   `xml:"Actions>Exec>Command"`
	Argument string   `xml:"Actions>Exec>Arguments"`
}

// TestWindowsTaskReadsBack decodes the rendered task as XML and splits its
// Arguments the way Windows splits a command line: what the agent receives
// is exactly the arguments asked for, spaces and quotes included.
func TestWindowsTaskReadsBack(t *testing.T) {
	out, err := WindowsLogonTask(spacey)
	if err != nil {
		t.Fatal(err)
	}
	// encoding/xml refuses a UTF-16 declaration on a Go string; the
	// content is what is checked here, the file encoding below.
	body := strings.Replace(out, `encoding="UTF-16"`, `encoding="UTF-8"`, 1)
	var got taskXML
	dec := xml.NewDecoder(strings.NewReader(body))
	dec.Strict = true
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("not well-formed: %v\n%s", err, out)
	}
	if got.URI != `\roomrelay` || got.Command != spacey.Exec || got.User != spacey.UserID ||
		!slices.Equal(got.Logon, []string{spacey.UserID}) || got.Type != "InteractiveToken" ||
		got.Level != "LeastPrivilege" || got.Limit != "PT0S" || got.Battery != "false" {
		t.Errorf("task reads back as %+v", got)
	}
	if args := splitWindows(t, got.Argument); !slices.Equal(args, spacey.Args) {
		t.Errorf("Arguments %s split back to %q, want %q", got.Argument, args, spacey.Args)
	}
}

func TestUTF16File(t *testing.T) {
	b := UTF16File("<a>é€</a>")
	if b[0] != 0xff || b[1] != 0xfe || len(b)%2 != 0 {
		t.Fatalf("no UTF-16LE byte-order mark: % x", b[:4])
	}
	u := make([]uint16, 0, len(b)/2-1)
	for i := 2; i < len(b); i += 2 {
		u = append(u, uint16(b[i])|uint16(b[i+1])<<8)
	}
	if s := string(utf16.Decode(u)); s != "<a>é€</a>" {
		t.Errorf("decodes to %q", s)
	}
}

func TestWindowsCommandLineRoundTrip(t *testing.T) {
	for _, args := range [][]string{
		{"run"},
		{"run", "--home", `C:\Program Files\x`},
		{`a"b`, `c\`, `d e\`, `f\\"g`, ""},
		{`C:\dir with space\`, "tab\there"},
	} {
		line := WindowsCommandLine(args)
		if got := splitWindows(t, line); !slices.Equal(got, args) {
			t.Errorf("WindowsCommandLine(%q) = %s, which Windows splits to %q", args, line, got)
		}
	}
}

func TestWindowsTaskRefuses(t *testing.T) {
	for name, p := range map[string]TaskParams{
		"relative exec":   {Exec: `roomrelay.exe`, UserID: "u"},
		"unix exec":       {Exec: `/usr/bin/roomrelay`, UserID: "u"},
		"no user":         {Exec: `C:\r.exe`},
		"newline in arg":  {Exec: `C:\r.exe`, UserID: "u", Args: []string{"run\r\n</Arguments>"}},
		"slash in name":   {Exec: `C:\r.exe`, UserID: "u", Name: `a\b`},
		"control in user": {Exec: `C:\r.exe`, UserID: "u\x00"},
	} {
		if _, err := WindowsLogonTask(p); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// splitWindows is the Microsoft C runtime's (and CommandLineToArgvW's) rule
// for splitting a command line's arguments: whitespace separates outside
// quotes; 2n backslashes before a quote are n backslashes and the quote
// toggles quoting; 2n+1 are n and a literal quote; other backslashes are
// literal.
func splitWindows(t *testing.T, s string) []string {
	t.Helper()
	var args []string
	var cur strings.Builder
	inQuote, have := false, false
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\':
			n := 0
			for i < len(s) && s[i] == '\\' {
				n++
				i++
			}
			if i < len(s) && s[i] == '"' {
				cur.WriteString(strings.Repeat(`\`, n/2))
				if n%2 == 1 {
					cur.WriteByte('"')
					i++
				}
			} else {
				cur.WriteString(strings.Repeat(`\`, n))
			}
			have = true
		case c == '"':
			inQuote = !inQuote
			have = true
			i++
		case (c == ' ' || c == '\t') && !inQuote:
			if have {
				args = append(args, cur.String())
				cur.Reset()
				have = false
			}
			i++
		default:
			cur.WriteByte(c)
			have = true
			i++
		}
	}
	if inQuote {
		t.Fatalf("unbalanced quotes in %s", s)
	}
	if have {
		args = append(args, cur.String())
	}
	return args
}
