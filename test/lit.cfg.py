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
# (containers, CI) and more ranks than cores. `%mpi` prefixes a command that
# joins an MPI job: the sanitizer build's leak check is off there, because
# OpenMPI unloads its plugins at MPI_Finalize and what they keep can then
# not be told from headroom's (the single-process suites leak-check the
# same code; AddressSanitizer's other checks stay on).
config.environment["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
config.environment["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
config.environment["OMPI_MCA_rmaps_base_oversubscribe"] = "1"
config.substitutions.append(("%mpi", "env ASAN_OPTIONS=detect_leaks=0"))
for name in ("ASAN_OPTIONS", "UBSAN_OPTIONS"):
    if name in os.environ:
        config.environment[name] = os.environ[name]
