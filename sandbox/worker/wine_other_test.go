//go:build !windows

package worker

func underWine() bool { return false }
