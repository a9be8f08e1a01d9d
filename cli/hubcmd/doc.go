// Package hubcmd adds the commands of the full roomrelay binary to package
// cli: the hub server (`roomrelay hub`, with its metrics listener), the demo
// (`roomrelay demo`, a real hub and agent over loopback, with an MCP client)
// and the hidden sandbox worker subcommand. Importing it is what links
// nats-server, the MCP SDK, esbuild and goja: cmd/roomrelay imports it for
// its side effect (each file registers its commands from init with
// cli.Register); the device binary cmd/roomrelay-agent does not, and
// cli/TestDeviceBuildLinksNoServer checks that it links none of them.
package hubcmd
