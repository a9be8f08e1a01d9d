package worker

import "golang.org/x/sys/windows"

// underWine reports whether this Windows process runs under Wine (its ntdll
// exports wine_get_version), for the few facts Wine does not reproduce.
func underWine() bool {
	return windows.NewLazySystemDLL("ntdll.dll").NewProc("wine_get_version").Find() == nil
}
