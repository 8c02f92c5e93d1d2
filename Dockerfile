# syntax=docker/dockerfile:1
#
# cooldownd container image: a static Go binary on distroless (no shell, no package manager),
# running as the non-root user 65532. Build it from the repository root:
#
#   docker build -t ghcr.io/cooldownd/cooldownd:0.1.0 .
#   docker buildx build --platform linux/amd64,linux/arm64 -t ghcr.io/cooldownd/cooldownd:0.1.0 .
#
# The default command listens on every interface, which cooldownd refuses to do without
# authentication: give --tokens-file (or, for a local trial only, --insecure-no-auth), e.g.
#
#   docker run --rm -p 8080:8080 ghcr.io/cooldownd/cooldownd:0.1.0 \
#     --addr 0.0.0.0:8080 --log-format json --insecure-no-auth
#
# The Helm chart (deploy/helm/cooldownd) replaces the command's arguments with its own.

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
# Module downloads are a layer of their own: they change less often than the code.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w" -o /out/cooldownd ./cmd/cooldownd

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/cooldownd /cooldownd
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/cooldownd"]
CMD ["--addr", "0.0.0.0:8080", "--log-format", "json"]
