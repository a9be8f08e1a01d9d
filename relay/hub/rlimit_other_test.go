//go:build !unix

package hub

func raiseFileLimit() {}
