# Sourced by the other scripts: where builds go, and a check that the toolchain is here.
# The cargo target directory lives outside the checkout so that reruns and CI reuse builds.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/ecn-tuner/target}"
if ! command -v cargo >/dev/null 2>&1; then
  for d in "$HOME/.cargo/bin" /usr/local/cargo/bin; do
    [ -x "$d/cargo" ] && export PATH="$d:$PATH" && break
  done
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "error: cargo not found. Install Rust 1.87 or newer (https://rustup.rs) and rerun." >&2
  exit 1
fi
mkdir -p "$CARGO_TARGET_DIR"
