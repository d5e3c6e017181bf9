# Sourced on the GPU machine from the repository root, after the two calls that
# benchmarks/tvm_gpu_carry.sh describes: assembles the apache-tvm wheel into
# /tmp/tvmsite once, puts libcudart.so.13 (torch's CUDA runtime package) on the loader's
# path for TVM's CUDA runtime, and makes this checkout and TVM importable.
S=/tmp/tvmsite
if [ ! -f $S/tvm/__init__.py ]; then
    mkdir -p $S
    cat /tmp/tvmparts/part_aa .tvm_carry_b/part_ab | xz -d | tar -x -C $S || return 1
    tar -xJf .tvm_carry_b/rest.tar.xz -C $S || return 1
    python3 -m pip install -q --no-index --no-deps --no-compile --target $S \
        .tvm_carry_b/apache_tvm_ffi-*.whl || return 1
fi
CUDART=$(find "$(python3 -c 'import sys; print(sys.prefix)')" -name 'libcudart.so.13*' | head -1)
[ -n "$CUDART" ] && export LD_LIBRARY_PATH=$(dirname "$CUDART"):${LD_LIBRARY_PATH:-}
export PY=python3
OUT="${OUT:-$PWD/benchmarks/out}"
mkdir -p "$OUT"
. tools/gpu_setup.sh
export PYTHONPATH=$PWD:$S:${PYTHONPATH:-}
python3 -c "import tvm; d = tvm.cuda(0); print('tvm', tvm.__version__, 'sees', d.device_name if d.exist else 'no GPU')"
