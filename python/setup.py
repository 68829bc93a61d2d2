"""The evotune Python package: a client of the evotune daemon and a PyTorch
op that runs tuned kernels. The gRPC stubs are generated from ../proto when
the package is built, with protoc and grpc_python_plugin (Debian 12:
protobuf-compiler, protobuf-compiler-grpc; $PROTOC and $GRPC_PYTHON_PLUGIN
override where they are)."""
import os
import pathlib
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).resolve().parent
PROTOS = ["evotune", "worker", "comparison", "bundle"]


class BuildWithStubs(build_py):
    """Generates evotune/v1/*_pb2.py and *_pb2_grpc.py into the build."""

    def run(self):
        super().run()
        protoc = os.environ.get("PROTOC") or shutil.which("protoc")
        plugin = (os.environ.get("GRPC_PYTHON_PLUGIN")
                  or shutil.which("grpc_python_plugin"))
        if not protoc or not plugin:
            raise RuntimeError(
                "building evotune needs protoc and grpc_python_plugin "
                "(apt-get install protobuf-compiler protobuf-compiler-grpc)")
        proto_dir = HERE.parent / "proto"
        out = pathlib.Path(self.build_lib)
        for name in PROTOS:
            subprocess.run(
                [protoc, f"-I{proto_dir}", f"--python_out={out}",
                 f"--grpc_python_out={out}",
                 f"--plugin=protoc-gen-grpc_python={plugin}",
                 str(proto_dir / "evotune" / "v1" / f"{name}.proto")],
                check=True)
        (out / "evotune" / "v1" / "__init__.py").touch()


setup(
    name="evotune",
    version="0.1.0",
    description="Client of the evotune kernel tuning daemon; tuned "
                "attention kernels in PyTorch",
    packages=["evotune"],
    python_requires=">=3.9",
    install_requires=["grpcio", "protobuf"],
    cmdclass={"build_py": BuildWithStubs},
)
