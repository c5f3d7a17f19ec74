# lit configuration shared by test/passes and test/cli.
import os
import lit.formats

config.name = "headroom"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".hr", ".test"]
config.excludes = ["Inputs"]
config.excludes = ["Inputs"]

site = lit_config.params.get("site")
if site:
    lit_config.load_config(config, site)
config.substitutions.append(("%python", "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"))
config.substitutions.append(("%models", os.path.join(config.headroom_src_dir, "test", "models")))
config.environment["PATH"] = os.pathsep.join(
    [config.headroom_bin_dir, config.llvm_tools_dir, config.environment.get("PATH", "")])

# onnxruntime (PyPI, optional): proves that saved models run in a peer runtime.
import shutil
import subprocess
for candidate in ("python3", "/usr/bin/python3"):
    exe = shutil.which(candidate)
    if exe and subprocess.run([exe, "-c", "import onnxruntime, numpy"],
                              capture_output=True).returncode == 0:
        config.available_features.add("onnxruntime")
        config.substitutions.append(("%ortpython", exe))
        break

# Data parallelism's tests launch ranks with OpenMPI's mpirun: as root too
# (containers, CI), more ranks than cores, and the sanitizer build's leak
# check quiet about OpenMPI's own allocations (test/lsan-mpi.supp).
config.environment["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
config.environment["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
config.environment["OMPI_MCA_rmaps_base_oversubscribe"] = "1"
config.environment["LSAN_OPTIONS"] = "suppressions=" + os.path.join(
    config.headroom_src_dir, "test", "lsan-mpi.supp")
for name in ("ASAN_OPTIONS", "UBSAN_OPTIONS"):
    if name in os.environ:
        config.environment[name] = os.environ[name]
