# The cdtarget image: one statically linked binary, a CA bundle and an empty /tmp, on `scratch`,
# run as 65532:65532. See docs/install.md ("The image", "Supply chain").
#
#   docker build -t cdtarget .          (or: buildah bud -t cdtarget .)
#
# Build arguments:
#   BINARY_FROM  `build` (default): compile the binary from this checkout in the Rust image below.
#                `prebuilt`: take the file system laid out by hack/image-rootfs.sh in `rootfs/`
#                of the build context instead (a binary built with hack/static-binary.sh). The
#                test suite builds the image this way, with no image pulled (tests/image.rs).
#   RUST_IMAGE   the build stage's base; pinned by digest (docs/install.md says what is verified).
#   VERSION, REVISION   the OCI labels `version` (keep it the crate's version) and `revision`
#                (`--build-arg REVISION=$(git rev-parse HEAD)`, also what `cdtarget version` says).
ARG BINARY_FROM=build
ARG RUST_IMAGE=docker.io/library/rust:1.95-bookworm@sha256:6258907abe69656e41cd992e0b705cdcfabcbbe3db374f92ed2d47121282d4a1

# The binary built from source. The Rust image (Debian 12) brings what the vendored C libraries
# need: a C compiler, perl and make for OpenSSL, the static glibc, and the CA bundle.
FROM ${RUST_IMAGE} AS build
ARG REVISION=
WORKDIR /src
COPY . .
# The context has no .git: `cdtarget version` learns the commit from REVISION (build.rs reads
# CDTARGET_GIT_COMMIT and ignores it when empty).
RUN binary="$(CDTARGET_GIT_COMMIT="$REVISION" hack/static-binary.sh)" \
 && hack/image-rootfs.sh "$binary" /etc/ssl/certs/ca-certificates.crt /rootfs

# A binary built elsewhere, already laid out by hack/image-rootfs.sh in `rootfs/` of the context.
FROM scratch AS prebuilt
COPY rootfs/ /rootfs/

# On demand only, the CycloneDX SBOM of the binary's dependency tree (crates, and through
# openssl-src, libgit2-sys, libssh2-sys and libz-sys the C libraries built into it):
#   docker build --target sbom --output type=local,dest=. .    (buildah bud takes the same options)
# writes cdtarget_bin.cdx.json. The default build skips both stages.
FROM ${RUST_IMAGE} AS sbom-build
WORKDIR /src
COPY . .
RUN cargo install --locked --root /opt/sbom cargo-cyclonedx@0.5.9 \
 && PATH="/opt/sbom/bin:$PATH" cargo cyclonedx --features vendored --describe binaries \
      --target "$(rustc -vV | sed -n 's/^host: //p')" --spec-version 1.5 --format json

FROM scratch AS sbom
COPY --from=sbom-build /src/cdtarget_bin.cdx.json /

# Whichever of the two BINARY_FROM names (buildah and BuildKit skip the other one). The `:-build`
# repeats the default because buildah 1.28 (Debian 12) decides which stages to skip from the
# --build-arg values alone: with a plain `${BINARY_FROM}` it skips the build stage, then looks
# for an image named `build`.
FROM ${BINARY_FROM:-build} AS binary

FROM scratch
ARG VERSION=0.1.0
ARG REVISION=
COPY --from=binary /rootfs/ /
# Where the vendored OpenSSL (libgit2's HTTPS) and rustls-native-certs (the GitLab client) find
# the CA bundle. Both are set so that git2 finds them valid and never calls setenv(3) itself.
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    SSL_CERT_DIR=/etc/ssl/certs
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/cdtarget"]
LABEL org.opencontainers.image.title="cdtarget" \
      org.opencontainers.image.description="GitOps controller for multi-tenant Kubernetes clusters" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.base.name="scratch"
