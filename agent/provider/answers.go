package provider

import (
	"encoding/json"
	"slices"
)

// InstallOutcome is what one answer to apps.install does to the install.
type InstallOutcome string

// The outcomes of an answer to apps.install.
const (
	// OutcomeInstalled: the app installed it (a result).
	OutcomeInstalled InstallOutcome = "installed"
	// OutcomeFailed ends the install as failed, visibly; it is never
	// delivered again.
	OutcomeFailed InstallOutcome = "failed"
	// OutcomeRetried leaves it pending: delivered again on the backoff
	// schedule while the app is connected, and at once on its next hello.
	OutcomeRetried InstallOutcome = "retried"
)

// InstallAnswer is one row of the install-answers table: the data.code of
// an app's JSON-RPC error answer to apps.install, and what it does.
type InstallAnswer struct {
	Code    string         `json:"code"`
	Outcome InstallOutcome `json:"outcome"`
	Meaning string         `json:"meaning"`
}

// installAnswers is the one table of install answers (#28 §1.3): the
// installer reads it, docs/provider-protocol.md and clients/ts/README.md
// carry it (TestInstallAnswersDocumented), and testdata/install-answers.json
// is its copy for other languages (clients/ts mirrors it as constants and
// checks them against that file). A code that is not listed, an error
// without data.code, no answer by the deadline and the connection closing
// are all retried.
var installAnswers = []InstallAnswer{
	{Code: "hash_mismatch", Outcome: OutcomeFailed, Meaning: "the files do not hash to content_hash (the app recomputed it)"},
	{Code: "invalid_args", Outcome: OutcomeFailed, Meaning: "the app refused the arguments or the content"},
	{Code: "not_found", Outcome: OutcomeFailed, Meaning: "the Room is gone"},
	{Code: "busy", Outcome: OutcomeRetried, Meaning: "the app cannot install now"},
	{Code: "internal", Outcome: OutcomeRetried, Meaning: "the app failed; any other code, or none, reads the same"},
}

// InstallAnswers returns a copy of the install-answers table.
func InstallAnswers() []InstallAnswer { return slices.Clone(installAnswers) }

// installOutcome is what an error answer with data.code code does: the
// table's row, else retried.
func installOutcome(code string) (InstallAnswer, bool) {
	for _, a := range installAnswers {
		if a.Code == code {
			return a, true
		}
	}
	return InstallAnswer{Code: code, Outcome: OutcomeRetried}, false
}

// installAnswersJSON is testdata/install-answers.json's content.
func installAnswersJSON() []byte {
	b, _ := json.MarshalIndent(struct {
		Comment string          `json:"_comment"`
		Answers []InstallAnswer `json:"answers"`
	}{"The data.code of an error answer to apps.install, and what it does to the install; any code not listed is retried. Generated from agent/provider/answers.go by TestInstallAnswersDocumented (go test ./agent/provider -run TestInstallAnswersDocumented -update).", installAnswers}, "", "  ")
	return append(b, '\n')
}
