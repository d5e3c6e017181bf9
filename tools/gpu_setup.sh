# Sourced by the GPU scripts (benchmarks/gpu.sh, tools/gpu_tests.sh) from the
# repository root, with PY and OUT set: makes this checkout importable as torchkiln.
# torchkiln's import names map onto folders (core/ -> torchkiln, plugins/x ->
# torchkiln_x) and its plugins register through entry points, so it has to be
# installed; where pip can't, a shim folder of symlinks plus a dist-info with
# the entry points stands in for the installation.
uses_this_checkout() {
    [ "$($PY -c 'import os, torchkiln; print(os.path.realpath(torchkiln.__path__[0]))' 2>/dev/null)" \
        = "$(realpath core)" ]
}

make_shim() {
    local shim
    shim="$(mktemp -d)"
    "$PY" - "$shim" <<'EOF'
import pathlib, sys, tomllib

shim, root = pathlib.Path(sys.argv[1]), pathlib.Path.cwd()
project = tomllib.loads((root / "pyproject.toml").read_text())
for package, folder in project["tool"]["setuptools"]["package-dir"].items():
    (shim / package).symlink_to(root / folder)
meta = project["project"]
dist = shim / f"{meta['name']}-{meta['version']}.dist-info"
dist.mkdir()
(dist / "METADATA").write_text(
    f"Metadata-Version: 2.1\nName: {meta['name']}\nVersion: {meta['version']}\n"
)
groups = meta.get("entry-points", {})
(dist / "entry_points.txt").write_text(
    "".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) + "\n"
        for group, eps in groups.items()
    )
)
EOF
    export PYTHONPATH="$shim${PYTHONPATH:+:$PYTHONPATH}"
}

if ! uses_this_checkout; then
    timeout 150 "$PY" -m pip install --no-deps --no-build-isolation -q -e . >"$OUT/pip.log" 2>&1
    if ! uses_this_checkout; then
        echo "editable install did not take (see pip.log); using a path shim"
        make_shim
        uses_this_checkout || echo "torchkiln is still not importable: torchkiln rows will fail"
    fi
fi


# The C++ guard checks for this machine's torch (torchkiln.capture.native): built now, so
# that no benchmark row or test starts with the Python checks while they build.
"$PY" -m torchkiln build-native >"$OUT/native.log" 2>&1 ||
    echo "the C++ guard checks did not build (see native.log): guards check tensors in Python"
