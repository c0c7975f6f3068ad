"""What a supernet family provides: the ``Family`` record the registry (``ofa.families.registry``) holds.

Every stage reaches a family only through this record (and the space, arch and supernet objects it
makes), so adding a family is a subpackage plus one ``Family`` in the registry; nothing outside
``ofa/families/`` names one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

Space: TypeAlias = Any  # a family's search space (mbv3: SearchSpace); its family is registry.family_of(space)
Arch: TypeAlias = Any  # an arch of a family's space (mbv3: Arch)
Supernet: TypeAlias = Any  # a family's supernet nn.Module (mbv3: OFAMobileNetV3)


@dataclass(frozen=True)
class TimmFolder:
    """How a model folder (config.json and card) describes the family's timm subnets."""

    key: str  # the config.json key holding `timm_args`
    architecture: str  # config.json's ``architecture`` (not in timm's registry: rebuilt from ``key``)
    holds: str  # what the card says ``key`` holds (mbv3: arch-definition strings and MobileNetV3 arguments)
    snippet: str  # lines rebuilding the model with timm alone; placeholders {config}, {weights}, {key}
    first_conv: str  # pretrained_cfg's module names
    classifier: str
    num_features: Callable[[Any], int]  # the built timm subnet -> width of the features its classifier reads


@dataclass(frozen=True)
class Family:
    """One family: its types, its gene layout and predictor encoder, its timm subnets and its importer.

    Spaces, archs and supernets follow the contract of ``docs/families.md`` (mbv3's ``SearchSpace``,
    ``Arch`` and ``OFAMobileNetV3`` are the model).
    """

    name: str
    space_type: type  # from_dict(d, source), to_dict, fingerprint, validate, layers, elastic_dims...
    presets: Mapping[str, Callable[[], Any]]  # preset name -> its space
    arch_type: type  # from_dict(d, source), from_ofa_config(config, resolution, source), to_ofa_config...
    # (space, official subnet config, source) -> the arch of ``space`` it runs (what an arch file may hold instead)
    official_arch: Callable[[Any, Mapping[str, Any], str], Any]
    supernet_type: type  # supernet_type(space): set_active, sample_active, extract, save/load
    layer_type: type  # LayerSpec: key, from_key(key), macs, params
    layout: Callable[[Any], Any]  # space -> its gene layout (ofa.families.genes.GeneLayoutBase), cached
    encoder: Callable[[Any], Any]  # space -> the predictor's ArchEncoder (dim, encode_rows, encode)
    sample_arch: Callable[..., Any]  # (space, rng, **restrictions by elastic_dims names) -> arch
    build_subnet: Callable[[Any, Any], Any]  # (space, arch) -> timm model
    timm_args: Callable[[Any, Any], dict[str, Any]]  # (space, arch) -> JSON-able args of timm_model
    timm_model: Callable[[dict[str, Any]], Any]  # args -> timm model (what a model folder's config.json rebuilds)
    layer_module: Callable[[Any, Any], Any]  # (space, layer spec) -> the nn.Module a latency table times for it
    official_matches: Callable[[Mapping[str, Any]], bool]  # official state dict -> is it this family's
    official_import: Callable[[Any, Any], Any]  # (path, import config) -> supernet
    import_config: type  # the flags of `ofa import` for this family (a dataclass of ofa.utils.fields)
    timm_folder: TimmFolder
    # (base space, a recipe's space: overrides, where) -> the space a run from a supernet of ``base`` trains
    derive_space: Callable[[Any, Any, str], Any]
    adapt_supernet: Callable[[Any, Any, int], Any]  # (supernet, derived space, seed) -> supernet fitted to it
