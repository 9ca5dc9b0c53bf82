#!/bin/sh
# Lays out the image's whole file system in DIR: the binary, the CA bundle and an empty /tmp
# (mode 1777: `cdtarget render URL` clones there; in a pod /tmp is an emptyDir anyway). The
# Dockerfile's runtime stage copies DIR as it is, so this script is the one place the layout is
# written, for the image built from source and for the one the test suite builds from a binary
# of the host (tests/image.rs).
#
#   hack/image-rootfs.sh BINARY CA_BUNDLE DIR
set -eu
if [ "$#" -ne 3 ]; then
  echo "usage: hack/image-rootfs.sh BINARY CA_BUNDLE DIR" >&2
  exit 2
fi
binary=$1
bundle=$2
root=$3

install -D -m 0755 "$binary" "$root/usr/local/bin/cdtarget"
install -D -m 0644 "$bundle" "$root/etc/ssl/certs/ca-certificates.crt"
install -d -m 1777 "$root/tmp"
