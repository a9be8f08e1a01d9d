package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
)

// terminalReader is a standard input that says whether it is a terminal.
// Tests pass one in Env.Stdin to play an owner at a terminal; a real
// process's *os.File is asked the OS (isTerminal).
type terminalReader interface {
	io.Reader
	IsTerminal() bool
}

// isTerminal reports whether f (Env.Stdin or Env.Stdout) is a terminal.
// /dev/null and pipes are not: a script must name the hash it approves.
func isTerminal(f any) bool {
	switch f := f.(type) {
	case terminalReader:
		return f.IsTerminal()
	case *os.File:
		return fdIsTerminal(f)
	}
	return false
}

// pageText shows text to the owner: through $PAGER (run by the shell, as
// git does) or else less when stdout is a terminal, with LESS=FRX unless
// LESS is set (quit at once when it fits the screen, leave the text on the
// screen, keep colours); otherwise, or if no pager starts, printed.
func pageText(e *Env, text string) {
	out, ok := e.Stdout.(*os.File)
	if ok && isTerminal(out) {
		if cmd := pagerCommand(e); cmd != nil {
			cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(text), out, e.Stderr
			// Not CommandContext: Ctrl-C in the pager is the pager's; the
			// prompt that follows sees the cancelled context.
			if err := cmd.Start(); err == nil {
				_ = cmd.Wait()
				return
			}
		}
	}
	fmt.Fprint(e.Stdout, text)
}

func pagerCommand(e *Env) *exec.Cmd {
	env := os.Environ()
	if e.Getenv("LESS") == "" {
		env = append(env, "LESS=FRX")
	}
	var cmd *exec.Cmd
	switch p := strings.TrimSpace(e.Getenv("PAGER")); {
	case p == "cat":
		return nil
	case p != "" && runtime.GOOS != "windows":
		cmd = exec.Command("/bin/sh", "-c", p)
	case p != "":
		cmd = exec.Command(p)
	default:
		less, err := exec.LookPath("less")
		if err != nil {
			return nil
		}
		cmd = exec.Command(less)
	}
	cmd.Env = env
	return cmd
}

// confirm asks question on stderr (stdout may be paged or redirected) and
// reads one line from stdin: only "y" or "yes" is yes. A Ctrl-C while it
// waits is no.
func confirm(ctx context.Context, e *Env, question string) (answer string, yes bool) {
	fmt.Fprint(e.Stderr, question)
	line := make(chan string, 1)
	go func() {
		// On Ctrl-C this goroutine stays blocked in Read until the process
		// exits, which it does right after.
		s, _ := bufio.NewReader(e.Stdin).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		answer = strings.TrimSpace(s)
	case <-ctx.Done():
		fmt.Fprintln(e.Stderr)
		return "", false
	}
	switch strings.ToLower(answer) {
	case "y", "yes":
		return answer, true
	}
	return answer, false
}
