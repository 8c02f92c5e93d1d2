package server

import (
	"context"
	"net/http"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"
)

// mountReflection mounts gRPC server reflection (v1, and v1alpha for older
// grpcurl builds) for services on mux. Reflection describes every RPC and
// message, AdminService's included, so with auth on it answers only an
// authenticated caller, of any role, as every other RPC does; with auth off
// it is open (docs/decisions/0044-auth-covers-metrics-and-reflection.md).
func (s *Server) mountReflection(mux *http.ServeMux, services ...string) {
	reflector := grpcreflect.NewStaticReflector(services...)
	opts := []connect.HandlerOption{connect.WithReadMaxBytes(MaxRequestBytes), connect.WithInterceptors(reflectionAuth{s})}
	mux.Handle(grpcreflect.NewHandlerV1(reflector, opts...))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector, opts...))
}

// reflectionAuth authenticates reflection calls: any valid token will do
// (procedureRoles covers the API; reflection is in no tenant).
type reflectionAuth struct{ s *Server }

func (i reflectionAuth) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if _, err := i.s.authenticate(req.Header()); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (i reflectionAuth) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i reflectionAuth) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if _, err := i.s.authenticate(conn.RequestHeader()); err != nil {
			return err
		}
		return next(ctx, conn)
	}
}
