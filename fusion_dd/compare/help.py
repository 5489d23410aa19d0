"""The help text of ``fusion-dd compare``; numpy-free so that the CLI starts fast."""

COMPARE_HELP = """Compare a fusion-on and a fusion-off tensor dump op by op and name the first op that goes wrong.

\b
DIRs are dump roots or any folder below them: Ascend binary dumps
(classic and FFTS+ names, _lxslice slices joined, nano dumps),
statistics-only dumps (statistic.csv), msaccucmp's .npy conversions,
framework .npy dumps, or .npy/.npz files named by op. With the GE
graph dumps of both runs (ge_proto_*_Build.txt, found in the DIRs or
given; or atc --mode=5 JSON), tensors pair by original op names and
the first divergence names its fusion rules and the layers it
replaced. Inputs are compared beside outputs when dumped. A tensor is
bad by cosine, absolute or relative error (--cosine, --max-abs,
--cosine-floor, --abs-ceiling, --rel). Formats fusion-dd does not
convert: --converters DIR of convert_<FROM>_to_<TO>.py files.

\b
Making a training dump (one step is enough; checked against the CANN,
TensorFlow adapter, torchair and MindSpore documentation):
  TF1 Estimator: NPURunConfig(dump_config=DumpConfig(enable_dump=True,
      dump_path=DIR, dump_step="0", dump_mode="output"))
  torchair:      config.dump_config.enable_dump = True;
      config.dump_config.dump_path = DIR;
      config.dump_config.dump_step = "0";
      config.dump_config.dump_mode = "output"
  GE API:        the option ge.exec.enableDump (CANN graph-mode guide)
  MindSpore:     a JSON file with "common_dump_settings" ("path",
      "net_name", "iteration", "input_output"), named by
      MINDSPORE_DUMP_CONFIG
  Graph dumps:   DUMP_GE_GRAPH=2, DUMP_GRAPH_PATH=DIR (ge_proto_*_Build.txt)
  Any framework: fusion_dd.integrations.dump_tensors(name, array)
      writes .npy files under FUSION_DD_DUMP_DIR.
Dumps land in {dump_path}/{time}/{device}/{model_name}/{model_id}/{step}/.
"""
