package main

// A wrapper is how a fragment of the docs becomes code that runs: the
// names it declares for the fragment (vars: name and value, from the
// runner's *env), what follows the fragment (post: usually returning what
// the fragment computed), and the runner in test/docsnippets that calls the
// wrapped fragment and checks what the docs promise of it.
type wrapper struct {
	doc     string
	runner  string
	results string // the wrapped function's results
	vars    [][2]string
	post    string
}

// wrappers are the names a <!-- snippet: NAME --> marker may give.
var wrappers = map[string]wrapper{
	"new-do": {
		doc:     "a client, a connection and one guarded call; the provider answers 429 once, and the retry must carry the body",
		runner:  "runDo",
		results: "(*http.Response, error)",
		vars:    [][2]string{{"ctx", "e.ctx"}, {"cooldowndURL", "e.cooldownd"}, {"apiKey", "e.apiKey"}, {"url", "e.url"}, {"body", "e.body"}},
		post:    "e.closeLater(cl)\nreturn resp, err",
	},
	"new": {
		doc:     "a client and a connection",
		runner:  "runNew",
		results: "error",
		vars:    [][2]string{{"cooldowndURL", "e.cooldownd"}, {"salt", "e.salt"}, {"apiKey", "e.apiKey"}},
		post:    "e.made, e.madeConn = c, conn\nreturn nil",
	},
	"do": {
		doc:     "one guarded call on the client c; the provider answers 429 once, and the retry must carry the body",
		runner:  "runDo",
		results: "(*http.Response, error)",
		vars: [][2]string{{"ctx", "e.ctx"}, {"c", "e.cl"}, {"conn", "e.conn"}, {"url", "e.url"}, {"body", "e.body"},
			{"httpClient", "e.httpClient"}},
		post: "return resp, err",
	},
	"fallback": {
		doc:     "a fallback list whose first candidate is out of quota; send calls the candidate's provider",
		runner:  "runFallback",
		results: "(*http.Response, error)",
		vars: [][2]string{{"ctx", "e.ctx"}, {"c", "e.cl"}, {"gpt4o", "e.fallback[0]"}, {"claude", "e.fallback[1]"},
			{"gpt4oMini", "e.fallback[2]"}, {"send", "e.send"}},
		post: "return resp, err",
	},
	"sdk-transport": {
		doc:     "an openai-go client over the guard; the runner calls the fake provider through it",
		runner:  "runSDKTransport",
		results: "openai.Client",
		vars:    [][2]string{{"c", "e.cl"}, {"conn", "e.conn"}},
		post:    "return oa",
	},
	"attempt": {
		doc:     "an Admit that says the call was already sent to primary",
		runner:  "runAttempt",
		results: "(client.Admission, error)",
		vars:    [][2]string{{"ctx", "e.ctx"}, {"c", "e.cl"}, {"primary", "e.fallback[0]"}, {"fallback", "e.fallback[1]"}},
		post:    "return a, err",
	},
	"by-hand": {
		doc:     "Admit, call and Report by hand; call sends to the admitted candidate's provider",
		runner:  "runByHand",
		results: "",
		vars: [][2]string{{"ctx", "e.ctx"}, {"c", "e.cl"}, {"primary", "e.fallback[0]"}, {"fallback", "e.fallback[1]"},
			{"call", "e.call"}},
	},
}
