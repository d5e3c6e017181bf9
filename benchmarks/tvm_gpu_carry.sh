#!/usr/bin/env bash
# Prepare the apache-tvm wheel for the GPU machine, which has no network and takes at
# most 64 MiB a call (working tree included): the wheel is 100 MB, its compiler library
# 260 MB unpacked. Run here, once, from the repository root:
#
#   bash benchmarks/tvm_gpu_carry.sh
#
# It writes two folders that .git/info/exclude ignores: .tvm_carry_a/ (the first 31 MB of
# the compiler library, xz-compressed) and .tvm_carry_b/ (the rest, the wheel's other files
# without CUTLASS's headers, and the cp312 apache-tvm-ffi wheel). Then, on the machine, two
# calls back to back (it is given back after 30 s idle):
#
#   run(carry=[".tvm_carry_a"], command="mkdir -p /tmp/tvmparts && cp .tvm_carry_a/part_aa /tmp/tvmparts/")
#   run(carry=[".tvm_carry_b"], command=". benchmarks/tvm_gpu_env.sh && python3 -m benchmarks.run ... kiln:tvm")
#
# tvm_gpu_env.sh assembles /tmp/tvmsite the first time and makes it importable.
set -eu
cd "$(dirname "$0")/.."
PIP="${PIP:-python3 -m pip}"
work="$(mktemp -d)"
$PIP download -q --no-deps -d "$work" apache-tvm==0.27.0.post1
$PIP download -q --no-deps --only-binary=:all: --python-version 3.12 -d "$work" apache-tvm-ffi==0.1.14.post0
mkdir "$work/x"
(cd "$work/x" && unzip -q ../apache_tvm-*.whl)
(cd "$work/x" && tar -cf - tvm/lib/libtvm_compiler.so | xz -T0 -9 >"$work/compiler.tar.xz")
(cd "$work/x" && tar --exclude=tvm/lib/libtvm_compiler.so --exclude=tvm/3rdparty/cutlass -cf - . \
    | xz -T0 -9 >"$work/rest.tar.xz")
rm -rf .tvm_carry_a .tvm_carry_b
mkdir .tvm_carry_a .tvm_carry_b
split -b 31000000 "$work/compiler.tar.xz" "$work/part_"
mv "$work/part_aa" .tvm_carry_a/
mv "$work/part_ab" "$work/rest.tar.xz" "$work"/apache_tvm_ffi-*.whl .tvm_carry_b/
for folder in /.tvm_carry_a/ /.tvm_carry_b/; do
    grep -qxF "$folder" .git/info/exclude 2>/dev/null || echo "$folder" >>.git/info/exclude
done
rm -rf "$work"
du -sh .tvm_carry_a .tvm_carry_b
