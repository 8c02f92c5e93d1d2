# syntax=docker/dockerfile:1
#
# cooldownd container image: a static Go binary on distroless (no shell, no package manager),
# running as the non-root user 65532. Build it from the repository root:
#
#   docker build --build-arg VERSION=v0.1.0 --build-arg REVISION=$(git rev-parse HEAD) -t ghcr.io/cooldownd/cooldownd:0.1.0 .
#   docker buildx build --platform linux/amd64,linux/arm64 --build-arg VERSION=v0.1.0 \
#     --build-arg REVISION=$(git rev-parse HEAD) -t ghcr.io/cooldownd/cooldownd:0.1.0 .
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
# Module downloads are a layer of their own: they change less often than the code. The root
# module requires the lean client modules through replace directives (decision 0040).
COPY go.mod go.sum ./
COPY api/go.mod api/go.sum api/
COPY client/go.mod client/go.sum client/
COPY internal/breaker/go.mod internal/breaker/go.sum internal/breaker/
COPY internal/keys/go.mod internal/keys/go.sum internal/keys/
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS TARGETARCH
# The build's identity, for `cooldownd --version`, the start line and cooldownd_build_info.
# A release build passes both; the build fails without VERSION rather than ship "devel":
#   docker build --build-arg VERSION=v0.1.0 --build-arg REVISION=$(git rev-parse HEAD) .
ARG VERSION
ARG REVISION=unknown
RUN test -n "$VERSION" || { echo "build with --build-arg VERSION=v1.2.3 (and REVISION=\$(git rev-parse HEAD))" >&2; exit 1; }
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -buildvcs=false \
      -ldflags="-s -w -X github.com/cooldownd/cooldownd/cmd/internal/buildinfo.version=${VERSION} -X github.com/cooldownd/cooldownd/cmd/internal/buildinfo.revision=${REVISION}" \
      -o /out/cooldownd ./cmd/cooldownd
# cooldown-proxy (docs/proxy.md) ships in the same image: the chart's proxy Deployment and a
# sidecar run it with `command: ["/cooldown-proxy"]`.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -buildvcs=false \
      -ldflags="-s -w -X github.com/cooldownd/cooldownd/cmd/internal/buildinfo.version=${VERSION} -X github.com/cooldownd/cooldownd/cmd/internal/buildinfo.revision=${REVISION}" \
      -o /out/cooldown-proxy ./cmd/cooldown-proxy

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION
ARG REVISION=unknown
LABEL org.opencontainers.image.version=$VERSION org.opencontainers.image.revision=$REVISION
COPY --from=build /out/cooldownd /cooldownd
COPY --from=build /out/cooldown-proxy /cooldown-proxy
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/cooldownd"]
CMD ["--addr", "0.0.0.0:8080", "--log-format", "json"]
