# syntax=docker/dockerfile:1
# The bizrq image: one binary on a distroless base, running as non-root.
#
#   docker build -t ghcr.io/bizrq/bizrq:0.1.0 .
#
# Needs BuildKit (the default builder of Docker 23+) for the cache mounts,
# which keep crates.io downloads and compiled dependencies between builds.

# --- build -------------------------------------------------------------------
FROM rust:1.95-bookworm AS build
WORKDIR /src
# The whole workspace (see .dockerignore): the members quota/, app/ and
# server/, plus migrations/ (sqlx::migrate!) and style/ (include_str!), which
# are read at compile time.
COPY . .
# target/ is a cache mount, so the binary is copied out in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release -p bizrq --locked \
 && install -D -m 0755 target/release/bizrq /out/bizrq

# --- portal islands (the browser's WASM bundle, README "Portal islands") --------
# rustup cannot add wasm32 offline; Debian's rustc-web and rust-web-src build
# std for it from source. wasm-bindgen-cli must be Cargo.lock's wasm-bindgen.
FROM rust:1.95-bookworm AS islands
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends rustc-web cargo-web rust-web-src \
 && rm -rf /var/lib/apt/lists/*
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    cargo install wasm-bindgen-cli --version 0.2.130
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    islands/build.sh /out/islands

# --- runtime -----------------------------------------------------------------
# distroless/cc: glibc, libgcc and CA certificates; the binary links only
# against glibc and libgcc (TLS is rustls, SQLite is compiled in). No shell,
# no package manager.
# :nonroot runs as uid/gid 65532, as the Kubernetes manifests require.
FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="bizrq" \
      org.opencontainers.image.description="Hierarchical GPU quotas for Kubernetes: portal, admission webhook and controller" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/bizrq /usr/local/bin/bizrq
# The islands bundle, served under /pkg/; without BIZRQ_ISLANDS_DIR pages
# are server-rendered only (as with JavaScript off).
COPY --from=islands /out/islands /usr/local/share/bizrq/islands
# A container must listen beyond its own loopback (the binary's defaults are
# 127.0.0.1). The Kubernetes Deployment sets the same values explicitly.
# Off loopback the webhook must know its caller: give it a client CA
# (BIZRQ_WEBHOOK_CLIENT_CA, as deploy/ does) or a token
# (BIZRQ_WEBHOOK_TOKEN[_FILE]), or it refuses to start (docs/webhook-trust.md).
ENV BIZRQ_ISLANDS_DIR=/usr/local/share/bizrq/islands \
    BIZRQ_LISTEN=0.0.0.0:3000 \
    BIZRQ_WEBHOOK_LISTEN=0.0.0.0:8443 \
    BIZRQ_PROBE_LISTEN=0.0.0.0:3001
# Standalone `docker run` keeps its SQLite file (sqlite://bizrq.db, relative)
# in the nonroot user's home; in Kubernetes DATABASE_URL points at PostgreSQL
# and the root filesystem is read-only.
WORKDIR /home/nonroot
USER 65532:65532
# 3000: portal, JSON API, /metrics, /healthz, /readyz (HTTP).
# 3001: /healthz and /readyz for the kubelet, on their own small pool (HTTP).
# 8443: admission webhook (HTTPS).
EXPOSE 3000 3001 8443
ENTRYPOINT ["/usr/local/bin/bizrq"]
CMD ["serve"]
