package packaging

import "testing"

func TestMSISourceGolden(t *testing.T) {
	got, err := WindowsMSISource(MSIParams{Version: "1.2.3-rc.1+g1234", Exe: "roomrelay.exe", Worker: "roomrelay-sandbox.exe"})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "msi-wxs", got)
}

func TestMSIVersion(t *testing.T) {
	for in, want := range map[string]string{"1.2.3": "1.2.3", "v0.10.7-3-gabc": "0.10.7", "0.0.0-ci": "0.0.0", "255.255.65535": "255.255.65535"} {
		if got, err := MSIVersion(in); err != nil || got != want {
			t.Errorf("MSIVersion(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"dev", "1.2", "256.0.0", "1.2.65536"} {
		if _, err := MSIVersion(bad); err == nil {
			t.Errorf("MSIVersion(%q) accepted", bad)
		}
	}
	if _, err := WindowsMSISource(MSIParams{Version: "1.0.0", Exe: "/abs/roomrelay.exe", Worker: "w.exe"}); err == nil {
		t.Error("an absolute source path (wixl refuses them) was accepted")
	}
}
