package server

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	connectcors "connectrpc.com/cors"
)

// corsMaxAge is how long (seconds) a browser may cache a preflight answer.
const corsMaxAge = "7200"

var (
	corsMethods = strings.Join(connectcors.AllowedMethods(), ", ")
	// Browsers send the bearer token in Authorization, which Connect's
	// list leaves to the application.
	corsHeaders = strings.Join(append(connectcors.AllowedHeaders(), "Authorization"), ", ")
	corsExposed = strings.Join(connectcors.ExposedHeaders(), ", ")
)

// checkOrigin accepts "*" or a scheme://host[:port] origin with nothing
// else (no path, no trailing slash), as browsers send it.
func checkOrigin(o string) error {
	if o == "*" {
		return nil
	}
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.User != nil || u.Fragment != "" {
		return fmt.Errorf("server: CORS origin %q must be * or scheme://host[:port], such as https://app.example.com", o)
	}
	return nil
}

// withCORS answers the API's CORS preflights and adds the CORS response
// headers for the allowed origins (Options.CORSOrigins), so browser
// clients on another origin can call the Connect and gRPC-Web API with a
// bearer token. Requests from other origins get no CORS headers (the
// browser then refuses the answer); with no origins configured the handler
// is next itself. Credentials (cookies) are never allowed: the API
// authenticates with the Authorization header only.
func (s *Server) withCORS(next http.Handler) http.Handler {
	if len(s.cors) == 0 {
		return next
	}
	any := slices.Contains(s.cors, "*")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" {
			next.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Add("Vary", "Origin")
		if !any && !slices.Contains(s.cors, origin) {
			next.ServeHTTP(w, r)
			return
		}
		allow := origin
		if any {
			allow = "*"
		}
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Add("Vary", "Access-Control-Request-Method")
			h.Add("Vary", "Access-Control-Request-Headers")
			h.Set("Access-Control-Allow-Origin", allow)
			h.Set("Access-Control-Allow-Methods", corsMethods)
			h.Set("Access-Control-Allow-Headers", corsHeaders)
			h.Set("Access-Control-Max-Age", corsMaxAge)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h.Set("Access-Control-Allow-Origin", allow)
		h.Set("Access-Control-Expose-Headers", corsExposed)
		next.ServeHTTP(w, r)
	})
}
