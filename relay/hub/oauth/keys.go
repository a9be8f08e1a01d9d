package oauth

// Every key of the store is built here. Secrets are stored only as
// hashes (hashSecret), so a key never reveals a token.
//
//	clients    c.<client id>           clientRec
//	flow       r.<request id>          pendingRec (a consent page's request)
//	           u.<hash(user code)>     request id
//	           z.<hash(code)>          codeRec
//	           l.<hash(login link)>    loginRec
//	grants     g.<grant id>            grantRec
//	tokens     a.<hash(access)>        accessRec
//	           f.<hash(refresh)>       refreshRec
//	           x.<hash(refresh)>       refreshRec of a rotated token, for its grace only
//	approvers  a.<approver id>         approverRec
//	sessions   s.<hash(session)>       sessionRec

func clientKey(id string) key         { return key{TableClients, "c." + id} }
func requestKey(id string) key        { return key{TableFlow, "r." + id} }
func userCodeKey(code string) key     { return userCodeKeyOf(userCodeHash(code)) }
func userCodeKeyOf(hash string) key   { return key{TableFlow, "u." + hash} }
func codeKey(code string) key         { return key{TableFlow, "z." + hashSecret("code", code)} }
func loginKey(tok string) key         { return key{TableFlow, "l." + hashSecret("login", tok)} }
func grantKey(id string) key          { return key{TableGrants, "g." + id} }
func accessKey(tok string) key        { return accessKeyOf(hashSecret("access", tok)) }
func refreshKey(tok string) key       { return refreshKeyOf(hashSecret("refresh", tok)) }
func accessKeyOf(hash string) key     { return key{TableTokens, "a." + hash} }
func refreshKeyOf(hash string) key    { return key{TableTokens, "f." + hash} }
func rotatedKeyOf(hash string) key    { return key{TableTokens, "x." + hash} }
func approverKey(id string) key       { return key{TableApprovers, "a." + id} }
func sessionKey(tok string) key       { return key{TableSessions, "s." + hashSecret("session", tok)} }
func userCodeHash(code string) string { return hashSecret("user-code", code) }

// The prefixes the lists read.
const (
	clientPrefix   = "c."
	grantPrefix    = "g."
	approverPrefix = "a."
)
