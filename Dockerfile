# GKO's image: the release binary alone, on a small runtime, as a non-root user.
#
#   docker build -t molo17/gluesync-operator:$(grep -m1 '^version' Cargo.toml | cut -d'"' -f2) .
#
# The first stage is the release build CI runs (`make release`: cargo build --release --locked); the image
# copies only the binary it produces. rustls and ring need no OpenSSL, so the runtime is distroless's
# C runtime (glibc, CA certificates, no shell).
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY crates ./crates
RUN cargo build --release --locked -p gluesync-operator --bin gluesync-operator \
 && install -D target/release/gluesync-operator /out/gluesync-operator

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/gluesync-operator /usr/local/bin/gluesync-operator
# distroless's nonroot user; the chart runs it with a read-only root filesystem and no capabilities.
USER 65532:65532
EXPOSE 1717 8080
ENTRYPOINT ["/usr/local/bin/gluesync-operator"]
CMD ["run"]
