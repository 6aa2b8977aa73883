"""@cuda: the CUDA toolkit at /usr/local/cuda (or $CUDA_PATH), if present.

With the toolkit, @cuda//:defs.bzl says CUDA_AVAILABLE = True and gives
cuda_library(), which compiles .cu files with nvcc (sm_90 code plus PTX, so
newer GPUs JIT it) into an object linked like any cc_library; @cuda//:cudart
and @cuda//:cublas link the runtime and cuBLAS. Without it, CUDA_AVAILABLE is
False and the CUDA targets are left out: the CPU-only worker still builds.
`--define cuda=false` leaves them out too (see //:cuda_disabled).
Nothing is downloaded.
"""

def _impl(ctx):
    root = ctx.os.environ.get("CUDA_PATH", "/usr/local/cuda")
    nvcc = ctx.path(root + "/bin/nvcc")
    if not nvcc.exists:
        ctx.file("BUILD", 'package(default_visibility = ["//visibility:public"])\n')
        ctx.file("defs.bzl", """CUDA_AVAILABLE = False
CUDA_ROOT = ""

def cuda_library(**kwargs):
    fail("CUDA is not installed: guard CUDA targets with CUDA_AVAILABLE")
""")
        return
    ctx.symlink(root + "/include", "include")
    ctx.file("BUILD", """package(default_visibility = ["//visibility:public"])

cc_library(
    name = "headers",
    hdrs = glob(["include/**"]),
    includes = ["include"],
)

cc_library(
    name = "cudart",
    linkopts = ["-L{root}/lib64", "-lcudart", "-Wl,-rpath,{root}/lib64"],
    deps = [":headers"],
)

cc_library(
    name = "cublas",
    linkopts = ["-L{root}/lib64", "-lcublas", "-lcublasLt", "-Wl,-rpath,{root}/lib64"],
    deps = [":cudart"],
)
""".format(root = root))
    ctx.file("defs.bzl", """CUDA_AVAILABLE = True
CUDA_ROOT = "{root}"

def cuda_library(name, srcs, hdrs = [], deps = [], **kwargs):
    \"\"\"Compiles `srcs` (.cu) with nvcc for sm_90 plus PTX.\"\"\"
    objs = []
    for src in srcs:
        obj = name + "_" + src.replace("/", "_").replace(".cu", ".o")
        native.genrule(
            name = obj + "_nvcc",
            srcs = [src] + hdrs,
            outs = [obj],
            cmd = ("{root}/bin/nvcc -std=c++17 -O3 -Xcompiler -fPIC " +
                   "-gencode arch=compute_90,code=sm_90 " +
                   "-gencode arch=compute_90,code=compute_90 " +
                   "-I. -c $(location " + src + ") -o $@"),
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["@cuda//:cudart"],
        **kwargs
    )
""".format(root = root))

cuda_configure = repository_rule(
    implementation = _impl,
    environ = ["CUDA_PATH"],
    local = True,
)
