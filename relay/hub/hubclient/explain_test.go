package hubclient

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestExplain: a transport failure says what to do; an answer from the hub
// is not a transport failure and comes back unchanged.
func TestExplain(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	_, err = New("http://"+closed, "").Devices(context.Background())
	if !Unreachable(err) || !strings.Contains(Explain(err).Error(), "cannot reach the hub") {
		t.Errorf("nothing listening: unreachable %v, %v", Unreachable(err), Explain(err))
	}

	plain := httptest.NewServer(http.NotFoundHandler())
	defer plain.Close()
	_, err = New(strings.Replace(plain.URL, "http://", "https://", 1), "").Devices(context.Background())
	if !Unreachable(err) || !strings.Contains(Explain(err).Error(), "serves plain HTTP") {
		t.Errorf("https to a plain-HTTP hub: unreachable %v, %v", Unreachable(err), Explain(err))
	}

	tlsSrv := httptest.NewTLSServer(http.NotFoundHandler())
	defer tlsSrv.Close()
	_, err = New(tlsSrv.URL, "").Devices(context.Background())
	if !Unreachable(err) || !strings.Contains(Explain(err).Error(), "not trusted") {
		t.Errorf("a certificate this machine does not trust: unreachable %v, %v", Unreachable(err), Explain(err))
	}

	_, err = New(plain.URL, "").Devices(context.Background())
	var ae *APIError
	if !errors.As(err, &ae) || Unreachable(err) || Explain(err) != err {
		t.Errorf("an answer from the hub (404): %T %v", err, err)
	}
}
