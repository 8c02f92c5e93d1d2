package server

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"github.com/cooldownd/cooldownd/internal/store"
)

// errInvalid builds an invalid_argument error naming the field.
func errInvalid(field, format string, args ...any) error {
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
}

// toConnect maps a store error to a Connect error. It is the one place
// domain errors become wire codes; messages never carry key material.
func toConnect(err error) error {
	var ce *connect.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ce):
		return err
	case errors.Is(err, store.ErrLeaseNotHeld):
		return connect.NewError(connect.CodeFailedPrecondition, errors.New("lease not held: it expired or was settled"))
	case errors.Is(err, store.ErrTooManyConnections):
		return connect.NewError(connect.CodeResourceExhausted, errors.New("the tenant's connection cap is reached; idle connections expire, or raise --max-connections-per-tenant"))
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, err)
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	case errors.Is(err, store.ErrUnavailable):
		return connect.NewError(connect.CodeUnavailable, errors.New("state store unavailable"))
	}
	return connect.NewError(connect.CodeInternal, errors.New("internal error"))
}
