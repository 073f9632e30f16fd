# Sourced by the other scripts: where builds go, and a check that the toolchain is here.
# The cargo target directory lives outside the checkout so that reruns and CI reuse builds.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/ecn-tuner/target}"
# Property tests take their fixed seed from .cargo/config.toml ([env] PROPTEST_RNG_SEED).

mkdir -p "$CARGO_TARGET_DIR"

# One script of this project at a time per target directory (a checkout and its CI clone
# share one): the toolchain installs, the checks below, the PyTorch install and the builds that
# follow must not interleave with another's. Held until the script that sourced this file
# ends; scripts that it starts inherit the hold. Where flock is missing (macOS has none) scripts
# are not kept apart: run one at a time. The scripts keep to bash 3.2 (macOS's /bin/bash), so
# the hold is on a fixed descriptor, 9, and the PyTorch install's below on 8.
if [ -z "${ECN_TUNER_LOCK_HELD:-}" ] && command -v flock >/dev/null 2>&1; then
  exec 9>"$CARGO_TARGET_DIR/.ecn-tuner.lock"
  if ! flock -n 9; then
    echo "waiting for another ecn-tuner script using $CARGO_TARGET_DIR to finish" >&2
    flock 9
  fi
  export ECN_TUNER_LOCK_HELD=1
fi

# Run a command without the hold: for tests, whose children (a redis-server, controllers) could
# outlive a test binary killed mid-run and keep the hold, and every later script waiting, for ever.
ecn_without_lock() {
  "$@" 9>&-
}

# Debian packages (after the first argument, what they are for the message), installed where
# this runs as root with apt-get; false, saying nothing, where it cannot.
ecn_apt_install() {
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 || return 1
  local what="$1"
  shift
  echo "installing $what (Debian packages: $*); this happens once" >&2
  # A failing third-party repository fails `update` but not the install from Debian's own.
  apt-get update -qq || echo "warning: apt-get update failed; installing from the package lists at hand" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# Rust 1.95 or newer (Cargo.toml's rust-version: the locked dependencies need it), said before
# a build fails deep in a dependency. A distribution's older cargo on PATH does not hide a
# rustup toolchain in ~/.cargo/bin (a shell that never read ~/.profile has only the former);
# where neither will do and rustup is not here, rustup installs the stable toolchain (into
# CARGO_HOME, where one is set).
ecn_cargo_bin="${CARGO_HOME:-$HOME/.cargo}/bin"
ecn_rust_new_enough() {
  local v
  v="$(rustc --version 2>/dev/null | awk '{print $2}')"
  [ -n "$v" ] && command -v cargo >/dev/null 2>&1 && printf '%s\n%s\n' 1.95.0 "${v%%-*}" | sort -V -C
}
if ! ecn_rust_new_enough; then
  for d in "$ecn_cargo_bin" /usr/local/cargo/bin; do
    if [ -x "$d/cargo" ] && PATH="$d:$PATH" ecn_rust_new_enough; then
      export PATH="$d:$PATH"
      break
    fi
  done
fi
if ! ecn_rust_new_enough && ! command -v rustup >/dev/null 2>&1 && [ ! -x "$ecn_cargo_bin/rustup" ]; then
  echo "installing Rust (rustup's stable toolchain, with rustfmt and clippy) into ${CARGO_HOME:-~/.cargo} and ${RUSTUP_HOME:-~/.rustup}; this happens once" >&2
  if command -v curl >/dev/null 2>&1 \
    && curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs \
    | sh -s -- -y --no-modify-path --profile minimal -c rustfmt,clippy >&2; then
    export PATH="$ecn_cargo_bin:$PATH"
  fi
fi
if ! ecn_rust_new_enough; then
  if command -v cargo >/dev/null 2>&1 && rustc --version >/dev/null 2>&1; then
    echo "error: Rust $(rustc --version 2>/dev/null | awk '{print $2}') is too old; ecn-tuner needs 1.95 or newer (rustup update)." >&2
  elif command -v rustup >/dev/null 2>&1 || [ -x "$ecn_cargo_bin/rustup" ]; then
    echo "error: rustup is installed but gives no working Rust toolchain; run \`rustup default stable\` (or \`rustup update\`) and rerun." >&2
  else
    echo "error: cargo not found and rustup could not install it (it needs curl and https://sh.rustup.rs)." \
      "Install Rust 1.95 or newer (https://rustup.rs) and rerun." >&2
  fi
  exit 1
fi
# The build compiles C and C++ (libtorch's bindings, ring, zstd) and links with cc.
if ! command -v cc >/dev/null 2>&1 || ! command -v c++ >/dev/null 2>&1; then
  ecn_apt_install "a C and C++ compiler" build-essential || true
  if ! command -v cc >/dev/null 2>&1 || ! command -v c++ >/dev/null 2>&1; then
    echo "error: no C or C++ compiler (cc, c++); install one (Debian/Ubuntu: sudo apt-get install build-essential) and rerun." >&2
    exit 1
  fi
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
  for ecn_lock in "$CARGO_TARGET_DIR"/*/.cargo-lock "$CARGO_TARGET_DIR"/*/*/.cargo-lock; do
    if [ -e "$ecn_lock" ] && command -v flock >/dev/null 2>&1 && ! flock -n "$ecn_lock" true; then
      echo "error: a build from ${ecn_last_checkout:-another checkout} is running in $CARGO_TARGET_DIR;" \
        "wait for it to finish, or set CARGO_TARGET_DIR to a directory of this checkout's own" >&2
      return 1
    fi
  done
  rm -rf "$CARGO_TARGET_DIR"/*/.fingerprint/ecn-* "$CARGO_TARGET_DIR"/*/*/.fingerprint/ecn-*
  echo "$ecn_checkout" > "$CARGO_TARGET_DIR/.last-checkout"
fi

# libtorch for tch: PyTorch 2.13.0 from PyPI in a virtualenv cached outside the checkout
# (tch 0.26 checks the version). torch-sys finds it through LIBTORCH_USE_PYTORCH, and the
# crates that link it (models, agent) bake its lib directory into their rpath (their build.rs).
ECN_TUNER_TORCH_VENV="${ECN_TUNER_TORCH_VENV:-$HOME/.cache/ecn-tuner/torch-venv}"
# Absolute (torch-sys runs its python from its own build directory; a relative path is taken
# from the checkout's root, where the scripts run), without a trailing slash (the lock is a
# file beside it).
case "$ECN_TUNER_TORCH_VENV" in /*) ;; *) ECN_TUNER_TORCH_VENV="$PWD/$ECN_TUNER_TORCH_VENV" ;; esac
while [ "${ECN_TUNER_TORCH_VENV%/}" != "$ECN_TUNER_TORCH_VENV" ] && [ "$ECN_TUNER_TORCH_VENV" != / ]; do
  ECN_TUNER_TORCH_VENV="${ECN_TUNER_TORCH_VENV%/}"
done
export ECN_TUNER_TORCH_VENV
ecn_torch_ok() {
  "$ECN_TUNER_TORCH_VENV/bin/python" -c 'import torch, sys; sys.exit(torch.__version__.split("+")[0] != "2.13.0")' 2>/dev/null
}
if ! ecn_torch_ok; then
  # Checkouts with other target directories share the venv: one installs at a time, and the
  # others find it done.
  mkdir -p "$(dirname "$ECN_TUNER_TORCH_VENV")"
  if command -v flock >/dev/null 2>&1; then
    exec 8>"$ECN_TUNER_TORCH_VENV.lock"
    ecn_venv_locked=1
    flock -n 8 || { echo "waiting for another ecn-tuner script installing PyTorch into $ECN_TUNER_TORCH_VENV" >&2; flock 8; }
  fi
fi
if ! ecn_torch_ok; then
  # PyTorch 2.13.0 has wheels for Python 3.10 to 3.14 only, on the platforms README
  # "Requirements" lists.
  if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    ecn_apt_install "python3 with its venv module" python3 python3-venv || true
  fi
  if ! python3 -c 'import sys; sys.exit(not (3, 10) <= sys.version_info[:2] <= (3, 14))' 2>/dev/null; then
    echo "error: PyTorch 2.13.0 (libtorch for tch) needs Python 3.10 to 3.14; python3 is" \
      "$( (command -v python3 >/dev/null 2>&1 && python3 --version 2>&1) || echo missing)" >&2
    exit 1
  fi
  echo "installing PyTorch 2.13.0 (libtorch for tch) into $ECN_TUNER_TORCH_VENV; this happens once" >&2
  # A venv made by another python3 (or left broken) starts afresh; one of this python3 is kept
  # and pip upgrades its torch. A folder that is no venv is never cleared.
  ecn_venv_clear=""
  if [ -e "$ECN_TUNER_TORCH_VENV" ] && [ -n "$(ls -A "$ECN_TUNER_TORCH_VENV" 2>/dev/null)" ]; then
    if [ ! -e "$ECN_TUNER_TORCH_VENV/pyvenv.cfg" ]; then
      echo "error: $ECN_TUNER_TORCH_VENV is not empty and not a virtualenv; point ECN_TUNER_TORCH_VENV elsewhere" >&2
      exit 1
    fi
    ecn_py_version='import sys; print(*sys.version_info[:2])'
    if [ "$("$ECN_TUNER_TORCH_VENV/bin/python" -c "$ecn_py_version" 2>/dev/null)" != "$(python3 -c "$ecn_py_version")" ]; then
      ecn_venv_clear=--clear
    fi
  fi
  python3 -m venv $ecn_venv_clear "$ECN_TUNER_TORCH_VENV" || { echo "error: python3 -m venv failed; install python3-venv" >&2; exit 1; }
  if ! "$ECN_TUNER_TORCH_VENV/bin/pip" install --quiet torch==2.13.0; then
    echo "error: pip install torch==2.13.0 failed. PyTorch 2.13.0 has wheels for Linux x86_64 and" \
      "aarch64 with glibc 2.28 or newer, and for macOS 14 or newer on Apple silicon, none for Intel" \
      "Macs or musl (Alpine); this is $(python3 -c 'import platform; print(platform.platform())' 2>/dev/null)." >&2
    exit 1
  fi
fi
if [ -n "${ecn_venv_locked:-}" ]; then
  exec 8>&-
  unset ecn_venv_locked
fi
export VIRTUAL_ENV="$ECN_TUNER_TORCH_VENV"
export PATH="$ECN_TUNER_TORCH_VENV/bin:$PATH"
export LIBTORCH_USE_PYTORCH=1
# torch-sys asks the venv's python where libtorch is, but reruns only when its own variables
# change: a venv moved, or remade for another Python (lib/python3.X/...), would leave builds
# linking, and binaries' rpath pointing, at a folder that is gone. Such builds are redone: only
# the torch-sys runs whose libtorch folder is gone (another project sharing the target
# directory, with a libtorch of its own, keeps its build). With CARGO_BUILD_TARGET the profiles
# sit one level deeper (<triple>/<profile>).
ecn_torch_lib="$("$ECN_TUNER_TORCH_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/torch/lib"
for ecn_output in "$CARGO_TARGET_DIR"/*/build/torch-sys-*/output "$CARGO_TARGET_DIR"/*/*/build/torch-sys-*/output; do
  [ -f "$ecn_output" ] || continue
  ecn_linked="$(sed -n 's|^cargo:rustc-link-search=native=\(.*/torch/lib\)$|\1|p' "$ecn_output" | head -n 1)"
  if [ -n "$ecn_linked" ] && [ ! -d "$ecn_linked" ]; then
    ecn_run="$(dirname "$ecn_output")"
    ecn_profile="$(dirname "$(dirname "$ecn_run")")"
    echo "libtorch moved to $ecn_torch_lib ($ecn_linked is gone): rebuilding torch-sys in $ecn_profile" >&2
    rm -rf "$ecn_run" "$ecn_profile/.fingerprint/$(basename "$ecn_run")"
  fi
done
