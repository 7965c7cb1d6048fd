"""A provider whose hook declares an op: providers implement ops, op libraries declare them."""
import torch

import ircore.kit as kit


@kit.hookimpl
def ircore_register(registrar):
    import ircore

    @ircore.register_op
    def declared_by_a_provider(x: torch.Tensor) -> torch.Tensor:
        return x
