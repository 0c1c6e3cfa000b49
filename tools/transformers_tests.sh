#!/usr/bin/env bash
# transformers' own common model tests (`ModelTesterMixin`, which every model in transformers passes) on every Lineage
# family: tests/modeling/test_transformers_common.py. They ship in the sdist of a transformers release, not in its
# wheel, so this downloads the sdist of the installed release (PyPI, about 11 MB) into FOLDER, unpacks its tests/ and
# runs the module on them. CI (.ci/run) runs it under the newest releases. docs/using.md ("Supported versions").
#
#     bash tools/transformers_tests.sh [FOLDER [PYTEST ARGS...]]    # default FOLDER: transformers-tests (git-ignored)
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-transformers-tests}
shift $(( $# > 0 ? 1 : 0 ))
version=$(python -c "import transformers; print(transformers.__version__)")
suite="$dest/transformers-$version/tests"
if [ ! -f "$suite/test_modeling_common.py" ]; then
    mkdir -p "$dest"
    if ! python -m pip download -q --no-deps --no-binary :all: "transformers==$version" -d "$dest"; then
        echo "transformers_tests: no sdist of transformers $version on the package index (a release from git has" \
             "none): install a released transformers" >&2
        exit 2
    fi
    tar xzf "$dest/transformers-$version.tar.gz" -C "$dest" "transformers-$version/tests"
fi
LINEAGE_TRANSFORMERS_TESTS="$suite" exec python -m pytest -q -W ignore::pytest.PytestUnknownMarkWarning \
    tests/modeling/test_transformers_common.py "$@"
