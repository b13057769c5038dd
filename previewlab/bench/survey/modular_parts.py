"""Modular pipelines: where their tiny components come from (diffusers' modular tests load theirs from the hub),
which inputs a pipeline no tester config names takes, and why some cannot run on a classic test's parts."""
from __future__ import annotations


# "FILE::Class": the dummy components of that classic test (FILE under the tests folder); "recipe:NAME": a
# builder of tests/tiny_hooks.py. The inputs are the pipeline's tester config's (tests/modular_pipelines) with
# the classic test's height, width, frames and text length, else the classic test's inputs that are inputs of
# the blocks; a recipe brings its own. Second field: the output to ask for where no tester config names it.
MODULAR_PARTS: dict[str, tuple[str, str]] = {
    "FluxModularPipeline": ("pipelines/flux/test_pipeline_flux.py::FluxPipelineTesterConfig", "images"),
    "FluxKontextModularPipeline": ("pipelines/flux/test_pipeline_flux_kontext.py::FluxKontextPipelineFastTests",
                                   "images"),
    "Flux2ModularPipeline": ("pipelines/flux2/test_pipeline_flux2.py::Flux2PipelineTesterConfig", "images"),
    "Flux2KleinModularPipeline": ("pipelines/flux2/test_pipeline_flux2_klein.py::Flux2KleinPipelineTesterConfig",
                                  "images"),
    "Flux2KleinBaseModularPipeline": (
        "pipelines/flux2/test_pipeline_flux2_klein.py::Flux2KleinPipelineTesterConfig", "images"),
    "Flux3ModularPipeline": ("recipe:flux3_modular", "images"),
    "Flux3DistilledModularPipeline": ("recipe:flux3_distilled", "images"),
    "HeliosModularPipeline": ("pipelines/helios/test_helios.py::HeliosPipelineFastTests", "videos"),
    "HeliosPyramidModularPipeline": ("pipelines/helios/test_helios.py::HeliosPipelineFastTests", "videos"),
    "HeliosPyramidDistilledModularPipeline": ("pipelines/helios/test_helios.py::HeliosPipelineFastTests", "videos"),
    "HunyuanVideo15ModularPipeline": (
        "pipelines/hunyuan_video1_5/test_hunyuan_1_5.py::HunyuanVideo15PipelineFastTests", "videos"),
    "Krea2ModularPipeline": ("recipe:krea2_modular", "images"),
    "Krea2TurboModularPipeline": ("recipe:krea2_turbo_modular", "images"),
    "ErnieImageModularPipeline": ("recipe:ernie_image_modular", "images"),
    "LTXModularPipeline": ("pipelines/ltx/test_ltx.py::LTXPipelineFastTests", "videos"),
    "LTX2ModularPipeline": ("pipelines/ltx2/test_ltx2.py::LTX2PipelineFastTests", "videos"),
    "LTX25ModularPipeline": ("recipe:ltx25_modular", "videos"),
    "QwenImageModularPipeline": ("pipelines/qwenimage/test_qwenimage.py::QwenImagePipelineTesterConfig", "images"),
    "QwenImageEditModularPipeline": (
        "pipelines/qwenimage/test_qwenimage_edit.py::QwenImageEditPipelineTesterConfig", "images"),
    "QwenImageEditPlusModularPipeline": (
        "pipelines/qwenimage/test_qwenimage_edit_plus.py::QwenImageEditPlusPipelineTesterConfig", "images"),
    "StableDiffusion3ModularPipeline": (
        "pipelines/stable_diffusion_3/test_pipeline_stable_diffusion_3.py::StableDiffusion3PipelineFastTests", "images"),
    "StableDiffusionXLModularPipeline": (
        "pipelines/stable_diffusion_xl/test_stable_diffusion_xl.py::StableDiffusionXLPipelineFastTests", "images"),
    "WanModularPipeline": ("pipelines/wan/test_wan.py::WanPipelineTesterConfig", "videos"),
    "Wan22ModularPipeline": ("pipelines/wan/test_wan_22.py::Wan22PipelineTesterConfig", "videos"),
    "WanImage2VideoModularPipeline": (
        "pipelines/wan/test_wan_image_to_video.py::WanImageToVideoPipelineTesterConfig", "videos"),
    "Wan22Image2VideoModularPipeline": (
        "pipelines/wan/test_wan_22_image_to_video.py::Wan22ImageToVideoPipelineTesterConfig", "videos"),
    "Wan22VaceModularPipeline": ("pipelines/wan/test_wan_vace.py::WanVACEPipelineTesterConfig", "videos"),
    "ZImageModularPipeline": ("pipelines/z_image/test_z_image.py::ZImagePipelineFastTests", "images"),
    "Cosmos3OmniModularPipeline": ("pipelines/cosmos/test_cosmos3.py::Cosmos3OmniPipelineFastTests", "videos"),
    "Cosmos3DistilledModularPipeline": ("pipelines/cosmos/test_cosmos3.py::Cosmos3OmniPipelineFastTests", "videos"),
}


# why a Modular pipeline cannot run on its classic test's parts, where the error alone does not say
MODULAR_HINTS: dict[str, str] = {
    name: "a pyramid pipeline steps a scheduler of one stage per pyramid level (the checkpoint's; the distilled one "
          "a HeliosDMDScheduler); the classic test's HeliosScheduler has one stage"
    for name in ("HeliosPyramidModularPipeline", "HeliosPyramidDistilledModularPipeline")
}

# a Modular pipeline no tester config names, and the config whose inputs it takes (its own blocks stay)
MODULAR_INPUTS: dict[str, str] = {
    "HeliosPyramidDistilledModularPipeline":
        "modular_pipelines/helios/test_modular_pipeline_helios.py::HeliosPyramidModularPipelineTesterConfig",
}
