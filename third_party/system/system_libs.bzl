"""Exposes Debian's system libraries as cc_library targets in @system.

Headers live in /usr/include (already on the compiler's search path), so each
target only carries link flags, taken from pkg-config where the package ships
a .pc file. Nothing is downloaded.
"""

_PKG_CONFIG = {
    "grpc": ["grpc++"],
    "protobuf": ["protobuf"],
    "zlib": ["zlib"],
    "yaml_cpp": ["yaml-cpp"],
    "gtest": ["gtest", "gmock"],
    "benchmark": ["benchmark"],
    # HMAC-SHA256 of the members' credentials (OpenSSL, which gRPC uses too).
    "crypto": ["libcrypto"],
}

# Packages without a .pc file (or whose .pc file pulls in more than we use).
_STATIC_FLAGS = {
    "absl": [
        "-labsl_statusor",
        "-labsl_status",
        "-labsl_cord",
        "-labsl_cordz_info",
        "-labsl_cord_internal",
        "-labsl_cordz_functions",
        "-labsl_cordz_handle",
        "-labsl_str_format_internal",
        "-labsl_synchronization",
        "-labsl_graphcycles_internal",
        "-labsl_time",
        "-labsl_time_zone",
        "-labsl_civil_time",
        "-labsl_strings",
        "-labsl_strings_internal",
        "-labsl_flags_parse",
        "-labsl_flags_usage",
        "-labsl_flags_usage_internal",
        "-labsl_flags_internal",
        "-labsl_flags_marshalling",
        "-labsl_flags_reflection",
        "-labsl_flags_config",
        "-labsl_flags_program_name",
        "-labsl_flags_private_handle_accessor",
        "-labsl_flags_commandlineflag",
        "-labsl_flags_commandlineflag_internal",
        "-labsl_hash",
        "-labsl_raw_hash_set",
        "-labsl_random_distributions",
        "-labsl_random_seed_sequences",
        "-labsl_random_internal_pool_urbg",
        "-labsl_random_internal_randen",
        "-labsl_random_internal_randen_hwaes",
        "-labsl_random_internal_randen_hwaes_impl",
        "-labsl_random_internal_randen_slow",
        "-labsl_random_internal_platform",
        "-labsl_random_internal_seed_material",
        "-labsl_random_seed_gen_exception",
        "-labsl_stacktrace",
        "-labsl_symbolize",
        "-labsl_debugging_internal",
        "-labsl_demangle_internal",
        "-labsl_malloc_internal",
        "-labsl_throw_delegate",
        "-labsl_raw_logging_internal",
        "-labsl_log_severity",
        "-labsl_int128",
        "-labsl_base",
        "-labsl_spinlock_wait",
        "-labsl_bad_optional_access",
        "-labsl_bad_variant_access",
        "-labsl_strerror",
        "-labsl_exponential_biased",
        "-labsl_city",
        "-labsl_low_level_hash",
        "-lpthread",
    ],
    "gtest_main": ["-lgtest_main", "-lgmock", "-lgtest", "-lpthread"],
    "openblas": ["-lopenblas"],
    "civetweb": ["-lcivetweb"],
}

def _system_libs_impl(ctx):
    build = ['package(default_visibility = ["//visibility:public"])', ""]
    for name, pkgs in _PKG_CONFIG.items():
        res = ctx.execute(["pkg-config", "--libs"] + pkgs)
        if res.return_code != 0:
            fail("pkg-config %s failed (run tools/setup.sh): %s" % (pkgs, res.stderr))
        flags = res.stdout.strip().split(" ")
        build.append("cc_library(name = %r, linkopts = %r)" % (name, flags))
    for name, flags in _STATIC_FLAGS.items():
        build.append("cc_library(name = %r, linkopts = %r)" % (name, flags))
    ctx.file("WORKSPACE", 'workspace(name = "%s")\n' % ctx.name)
    ctx.file("BUILD", "\n".join(build) + "\n")

system_libs = repository_rule(
    implementation = _system_libs_impl,
    local = True,
    doc = "cc_library wrappers around Debian's system libraries.",
)
