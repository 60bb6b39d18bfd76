#!/usr/bin/env bash
# One-time set-up: FFTW (shtns compiles against it), a virtual environment,
# and the package installed into it. Safe to run again: each step is skipped
# when its result is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
# The extras to install: "test" by default; `scripts/setup.sh docs` adds the documentation tools,
# `scripts/setup.sh hf` CPU torch and transformers (the checkpoint reader's reference, make test-hf).
EXTRAS=test
[ "${1:-}" = docs ] && EXTRAS=test,docs
[ "${1:-}" = hf ] && EXTRAS=test,hf

have_fftw() {
    # shtns's build needs both the header and the shared library.
    [ -f /usr/include/fftw3.h ] && ldconfig -p 2>/dev/null | grep -q 'libfftw3\.so'
}

if ! have_fftw; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "setup: installing libfftw3-dev (needed to compile shtns)"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libfftw3-dev >/dev/null
    else
        echo "setup: the FFTW library is missing; shtns cannot be built without it." >&2
        echo "       Install the Debian/Ubuntu package 'libfftw3-dev' (e.g. sudo apt-get install libfftw3-dev)" >&2
        echo "       or your system's FFTW3 development package, then run this command again." >&2
        exit 1
    fi
fi

if [ ! -x "$VENV/bin/python" ]; then
    echo "setup: creating virtual environment $VENV"
    "$PYTHON" -m venv "$VENV"
fi

stamp="$VENV/.installed-${EXTRAS/,/-}"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    echo "setup: installing the package with its extras [$EXTRAS] into $VENV (log: $VENV/setup.log)"
    if ! { "$VENV/bin/python" -m pip install --upgrade pip &&
           "$VENV/bin/python" -m pip install -e ".[$EXTRAS]"; } > "$VENV/setup.log" 2>&1; then
        tail -n 30 "$VENV/setup.log" >&2
        echo "setup: installing the package failed; the full log is $VENV/setup.log" >&2
        exit 1
    fi
    touch "$stamp"
fi

# The docs render formulas with MathJax; a copy kept in the environment makes the built site
# work offline. npm only fetches the package (a pinned version); without npm (or a network)
# the site loads MathJax from its CDN instead and still builds.
MATHJAX_VERSION=3.2.2
fetch_mathjax() {
    local target=$1 scratch
    scratch=$(mktemp -d)
    if (cd "$scratch" && npm pack "mathjax@$MATHJAX_VERSION" --silent >/dev/null 2>&1) &&
       tar xzf "$scratch/mathjax-$MATHJAX_VERSION.tgz" -C "$scratch"; then
        mkdir -p "$target/output/chtml/fonts"
        cp "$scratch/package/es5/tex-mml-chtml.js" "$scratch/package/LICENSE" "$target/"
        cp -r "$scratch/package/es5/output/chtml/fonts/woff-v2" "$target/output/chtml/fonts/"
        rm -rf "$scratch"
        return 0
    fi
    rm -rf "$scratch"
    return 1
}

if [ "$EXTRAS" = test,docs ]; then
    mathjax="$VENV/share/docs-static/mathjax"
    if [ ! -f "$mathjax/tex-mml-chtml.js" ]; then
        if command -v npm >/dev/null && fetch_mathjax "$mathjax"; then
            echo "setup: MathJax $MATHJAX_VERSION copied to $mathjax (formulas render offline)"
        else
            echo "setup: could not fetch MathJax with npm; the docs will load it from its CDN" >&2
        fi
    fi
fi
