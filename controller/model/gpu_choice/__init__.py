"""Which GPUs a job may get and which it should: the model's rules that every policy and
placer asks where it chooses GPUs (below the policies, which may not import
controller.placement).

- `candidates`: the GPU-choice filter (cordons, GPU models, CPU and memory for a job's
  pods, its quota's room), asked by every policy and by the placers' wrapper, and the
  controller's check of a plan against it (controller/checks.py).
- `best_fit`: the best-fit and emptiest-first rules that ConsolidatedPlacer, Optimus,
  ElasticFlow and Tiresias share.
- `gpu_type`: the fastest GPU type with room for a job's gang (issue 31), for the
  policies that choose a type and for `FastestTypePlacer`.
"""
