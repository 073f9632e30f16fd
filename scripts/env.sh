# Sourced by the other scripts: where builds go, and a check that the toolchain is here.
# The cargo target directory lives outside the checkout so that reruns and CI reuse builds.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/ecn-tuner/target}"
# Property tests draw their cases from a fixed seed, so that every test run is the same run;
# set PROPTEST_RNG_SEED to explore other cases.
export PROPTEST_RNG_SEED="${PROPTEST_RNG_SEED:-1}"
if ! command -v cargo >/dev/null 2>&1; then
  for d in "$HOME/.cargo/bin" /usr/local/cargo/bin; do
    [ -x "$d/cargo" ] && export PATH="$d:$PATH" && break
  done
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "error: cargo not found. Install Rust 1.95 or newer (https://rustup.rs) and rerun." >&2
  exit 1
fi
# The locked dependencies need Rust 1.95 (Cargo.toml's rust-version): say so before a build
# fails deep in a dependency.
ecn_rustc="$(rustc --version 2>/dev/null | awk '{print $2}')"
if ! printf '%s\n%s\n' 1.95.0 "${ecn_rustc%%-*}" | sort -V -C; then
  echo "error: Rust ${ecn_rustc:-?} is too old; ecn-tuner needs 1.95 or newer (rustup update)." >&2
  exit 1
fi
mkdir -p "$CARGO_TARGET_DIR"

# One script of this project at a time per target directory (a checkout and its CI clone
# share one): the check below, the PyTorch install and the builds that follow must not
# interleave with another's. Held until the script that sourced this file ends; scripts that
# it starts inherit the hold.
if [ -z "${ECN_TUNER_LOCK_HELD:-}" ] && command -v flock >/dev/null 2>&1; then
  exec {ecn_lock_fd}>"$CARGO_TARGET_DIR/.ecn-tuner.lock"
  if ! flock -n "$ecn_lock_fd"; then
    echo "waiting for another ecn-tuner script using $CARGO_TARGET_DIR to finish" >&2
    flock "$ecn_lock_fd"
  fi
  export ECN_TUNER_LOCK_HELD=1
fi

# Cargo decides whether a workspace crate is fresh from the modification times of the files
# its last build read, at that build's paths. Built last from another checkout (a CI clone, a
# second worktree), a crate whose files there have not changed since counts as fresh here,
# whatever this checkout holds, and tests run a binary of other sources. So when the checkout
# changes, the workspace crates' fingerprints go: they are rebuilt, the dependencies are not.
ecn_checkout="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
# A build still running from the other checkout holds cargo's lock on its profile directory;
# taking its fingerprints away mid-build breaks it, so wait for it instead.
ecn_last_checkout="$(cat "$CARGO_TARGET_DIR/.last-checkout" 2>/dev/null || true)"
if [ "$ecn_last_checkout" != "$ecn_checkout" ]; then
  for ecn_lock in "$CARGO_TARGET_DIR"/*/.cargo-lock; do
    if [ -e "$ecn_lock" ] && command -v flock >/dev/null 2>&1 && ! flock -n "$ecn_lock" true; then
      echo "error: a build from ${ecn_last_checkout:-another checkout} is running in $CARGO_TARGET_DIR;" \
        "wait for it to finish, or set CARGO_TARGET_DIR to a directory of this checkout's own" >&2
      return 1
    fi
  done
  rm -rf "$CARGO_TARGET_DIR"/*/.fingerprint/ecn-*
  echo "$ecn_checkout" > "$CARGO_TARGET_DIR/.last-checkout"
fi

# libtorch for tch: PyTorch 2.13.0 from PyPI in a virtualenv cached outside the checkout
# (tch 0.26 checks the version). torch-sys finds it through LIBTORCH_USE_PYTORCH, and the
# crates that link it (models, agent) bake its lib directory into their rpath (their build.rs).
export ECN_TUNER_TORCH_VENV="${ECN_TUNER_TORCH_VENV:-$HOME/.cache/ecn-tuner/torch-venv}"
if ! "$ECN_TUNER_TORCH_VENV/bin/python" -c 'import torch, sys; sys.exit(torch.__version__.split("+")[0] != "2.13.0")' 2>/dev/null; then
  # PyTorch 2.13.0 has wheels for Python 3.10 and newer only.
  if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    echo "error: PyTorch 2.13.0 (libtorch for tch) needs Python 3.10 or newer; python3 is" \
      "$(python3 --version 2>&1 || echo missing)" >&2
    exit 1
  fi
  echo "installing PyTorch 2.13.0 (libtorch for tch) into $ECN_TUNER_TORCH_VENV; this happens once" >&2
  # A venv made by another python3 (or left broken) starts afresh; one of this python3 is kept
  # and pip upgrades its torch. A folder that is no venv is never cleared.
  ecn_venv_flags=()
  if [ -e "$ECN_TUNER_TORCH_VENV" ] && [ -n "$(ls -A "$ECN_TUNER_TORCH_VENV" 2>/dev/null)" ]; then
    if [ ! -e "$ECN_TUNER_TORCH_VENV/pyvenv.cfg" ]; then
      echo "error: $ECN_TUNER_TORCH_VENV is not empty and not a virtualenv; point ECN_TUNER_TORCH_VENV elsewhere" >&2
      exit 1
    fi
    ecn_py_version='import sys; print(*sys.version_info[:2])'
    if [ "$("$ECN_TUNER_TORCH_VENV/bin/python" -c "$ecn_py_version" 2>/dev/null)" != "$(python3 -c "$ecn_py_version")" ]; then
      ecn_venv_flags=(--clear)
    fi
  fi
  python3 -m venv "${ecn_venv_flags[@]}" "$ECN_TUNER_TORCH_VENV" || { echo "error: python3 -m venv failed; install python3-venv" >&2; exit 1; }
  "$ECN_TUNER_TORCH_VENV/bin/pip" install --quiet torch==2.13.0 || { echo "error: pip install torch==2.13.0 failed" >&2; exit 1; }
fi
export VIRTUAL_ENV="$ECN_TUNER_TORCH_VENV"
export PATH="$ECN_TUNER_TORCH_VENV/bin:$PATH"
export LIBTORCH_USE_PYTORCH=1
