# syntax=docker/dockerfile:1
# meterproxy's image: a static binary on distroless, running as nonroot.
#   docker build --build-arg VERSION=$(git describe --tags --always) -t meterproxy .
# The build stage runs the same command as `make build` (CGO_ENABLED=0,
# -trimpath, -s -w, main.version stamped), which `make test` exercises.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/meterproxy ./cmd/meterproxy

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/meterproxy /usr/local/bin/meterproxy
COPY config.example.yaml /etc/meterproxy/config.yaml
USER nonroot:nonroot
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/meterproxy"]
CMD ["serve", "--config", "/etc/meterproxy/config.yaml"]
