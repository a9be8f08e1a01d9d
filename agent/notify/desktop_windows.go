//go:build windows

package notify

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"unicode/utf16"
)

// Desktop is the platform's notifier: a toast shown through PowerShell,
// best effort (an agent running as a service in session 0 has no desktop
// to show it on). cfg is not used on Windows.
func Desktop(cfg Config) Notifier { return toast{} }

type toast struct{}

// PowerShell's own AppUserModelID: toasts need a registered one, and
// roomrelay registers none.
const toastAppID = `{1AC14E77-02E7-4E5D-B744-2EB1AE5198B7}\WindowsPowerShell\v1.0\powershell.exe`

// toastScript builds the toast with the XML DOM (text nodes, so no markup
// from a name is interpreted); %s are base64 of the UTF-8 title and body,
// so no network text is part of the script's source.
const toastScript = `$ErrorActionPreference = 'Stop'
[Windows.UI.Notifications.ToastNotificationManager, Windows.UI.Notifications, ContentType = WindowsRuntime] > $null
[Windows.Data.Xml.Dom.XmlDocument, Windows.Data.Xml.Dom.XmlDocument, ContentType = WindowsRuntime] > $null
$title = [Text.Encoding]::UTF8.GetString([Convert]::FromBase64String('%s'))
$body = [Text.Encoding]::UTF8.GetString([Convert]::FromBase64String('%s'))
$xml = [Windows.UI.Notifications.ToastNotificationManager]::GetTemplateContent([Windows.UI.Notifications.ToastTemplateType]::ToastText02)
$t = $xml.GetElementsByTagName('text')
$t.Item(0).AppendChild($xml.CreateTextNode($title)) > $null
$t.Item(1).AppendChild($xml.CreateTextNode($body)) > $null
[Windows.UI.Notifications.ToastNotificationManager]::CreateToastNotifier('%s').Show([Windows.UI.Notifications.ToastNotification]::new($xml))
`

func (toast) Notify(ctx context.Context, n Note) error {
	bin, err := exec.LookPath("powershell.exe")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	summary, body := n.Text()
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	src := fmt.Sprintf(toastScript, b64(AppName+": "+summary), b64(body), toastAppID)
	// -EncodedCommand takes base64 of UTF-16LE: no command-line quoting.
	u := utf16.Encode([]rune(src))
	raw := make([]byte, 2*len(u))
	for i, c := range u {
		raw[2*i], raw[2*i+1] = byte(c), byte(c>>8)
	}
	cmd := exec.CommandContext(ctx, bin, "-NoProfile", "-NonInteractive", "-WindowStyle", "Hidden",
		"-EncodedCommand", base64.StdEncoding.EncodeToString(raw))
	const createNoWindow = 0x08000000 // no console window flashing up
	cmd.SysProcAttr = &syscall.SysProcAttr{HideWindow: true, CreationFlags: createNoWindow}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("%w: powershell: %w", ErrTimeout, err)
		}
		return fmt.Errorf("%w: powershell toast: %w: %s", ErrFailed, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}
