"""evotune: the client of the evotune kernel tuning daemon (Client), and in
evotune.torch a PyTorch op that runs the tuned kernels.

The client needs grpcio and protobuf; evotune.torch needs neither (it loads
the C++ runtime), so the client is imported on first use.
"""
__all__ = ["BUNDLE_FORMAT", "Client", "EvotuneError", "problem"]


def __getattr__(name):
    if name in __all__:
        from evotune import client
        return getattr(client, name)
    raise AttributeError(f"module 'evotune' has no attribute {name!r}")
