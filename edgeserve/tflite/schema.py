"""The TFLite flatbuffer schema (schema.fbs, LiteRT 2.3) as data, for a schema-driven walk.

One table per line, in field-id order, parsed once at import into :data:`SCHEMA`; the
verifier in :mod:`edgeserve.tflite.verify` walks a file by it. Kept as text rather than
generated code so a schema update is a diff of a few lines, checked by a test against
ai_edge_litert's generated reader.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

import numpy as np

__all__ = ["DEFAULTS", "DTYPES", "SCHEMA", "STRUCTS", "UNION_MEMBERS", "Field"]


class Field(NamedTuple):
    name: str
    kind: str  # "scalar", "string", "vector", "table", "union_type", "union"
    arg: str  # struct format, element format / table name, or union name
    default: Any
    deprecated: bool


def parse_schema(tables: str, unions: dict[str, str]) -> dict[str, tuple[Field, ...]]:
    """Field tables by field id from the compact spec at the end of this file."""
    union_names = set(unions)
    schema: dict[str, tuple[Field, ...]] = {}
    for line in tables.strip().replace("\n    ", " ").splitlines():
        name, *decls = line.split()
        fields: list[Field] = []
        for decl in decls:
            deprecated = decl.startswith("-")
            fname, _, ftype = decl.lstrip("-").partition(":")
            ftype, _, default_text = ftype.partition("=")
            if ftype.startswith("~"):
                assert ftype[1:] in union_names, ftype
                fields.append(Field(f"{fname}_type", "union_type", ftype[1:], 0, deprecated))
                fields.append(Field(fname, "union", ftype[1:], None, deprecated))
            elif ftype == "s":
                fields.append(Field(fname, "string", "", None, deprecated))
            elif ftype.startswith("["):
                fields.append(Field(fname, "vector", ftype[1:-1], None, deprecated))
            elif ftype in SCALAR_FORMATS:
                default: Any = (float if ftype in "fd" else int)(default_text or 0)
                fields.append(Field(fname, "scalar", ftype, default, deprecated))
            else:
                fields.append(Field(fname, "table", ftype, None, deprecated))
        schema[name] = tuple(fields)
    for kind_name, fields_ in schema.items():  # every referenced table exists
        for f in fields_:
            if f.kind in ("table", "vector") and f.arg not in SCALAR_FORMATS and f.arg != "s":
                assert f.arg in schema, (kind_name, f)
    return schema


SCALAR_FORMATS = {"b": "<b", "B": "<B", "?": "<?", "h": "<h", "H": "<H", "i": "<i", "I": "<I",
                   "f": "<f", "q": "<q", "Q": "<Q", "d": "<d"}
DTYPES = {k: np.dtype(v) for k, v in SCALAR_FORMATS.items()}
STRUCTS = {k: struct.Struct(v) for k, v in SCALAR_FORMATS.items()}


# --- the TFLite schema (schema.fbs, LiteRT 2.3), one table per line ----------------------------
# name field:type ... in field-id order. Types: struct formats for scalars (enums by their
# underlying type), s string, [x] vector, ~U union (two ids: the type byte, then the value),
# a table name; =v a non-zero default; a leading - marks a deprecated field (not verified,
# as in flatc's generated Verify). Generated from schema.fbs; tests/test_runtime_validate.py
# checks it against ai_edge_litert's generated reader.
_TABLES = """
CustomQuantization custom:[B]
BlockwiseQuantization scales:i zero_points:i block_size:i block_shape:[i]
MultiAxisQuantization scales:i zero_points:i block_size:i quantized_dimensions:[i]
QuantizationParameters min:[f] max:[f] scale:[f] zero_point:[q] details:~QuantizationDetails
    quantized_dimension:i
Int32Vector values:[i]
Uint16Vector values:[H]
Uint8Vector values:[B]
DimensionMetadata format:b dense_size:i array_segments:~SparseIndexVector
    array_indices:~SparseIndexVector
SparsityParameters traversal_order:[i] block_map:[i] dim_metadata:[DimensionMetadata]
VariantSubType shape:[i] type:b has_rank:?
Tensor shape:[i] type:b buffer:I name:s quantization:QuantizationParameters is_variable:?
    sparsity:SparsityParameters shape_signature:[i] has_rank:? variant_tensors:[VariantSubType]
    external_buffer:I
StablehloGatherOptions offset_dims:[q] collapsed_slice_dims:[q] start_index_map:[q]
    index_vector_dim:q slice_sizes:[q] indices_are_sorted:?
StablehloTransposeOptions permutation:[q]
StablehloDotGeneralOptions lhs_batching_dimensions:[q] rhs_batching_dimensions:[q]
    lhs_contracting_dimensions:[q] rhs_contracting_dimensions:[q] precision_config:[I]
StablehloReduceWindowOptions window_dimensions:[q] window_strides:[q] base_dilations:[q]
    window_dilations:[q] padding:[q] body_subgraph_index:i
StablehloWhileOptions cond_subgraph_index:i body_subgraph_index:i
StablehloSortOptions dimension:q is_stable:? comparator_subgraph_index:i
StablehloConcatenateOptions dimension:q
StablehloBroadcastInDimOptions broadcast_dimensions:[q]
StablehloCompareOptions comparison_direction:I compare_type:I
StablehloDynamicSliceOptions slice_sizes:[q]
StablehloPadOptions edge_padding_low:[q] edge_padding_high:[q] interior_padding:[q]
StablehloIotaOptions iota_dimension:q
StablehloCustomCallOptions call_target_name:s has_side_effect:? backend_config:s api_version:i
    called_computations:[i] custom_attributes:[B]
StablehloReduceOptions dimensions:[q] body_subgraph_index:i
StablehloSliceOptions start_indices:[q] limit_indices:[q] strides:[q]
StablehloConvolutionOptions window_strides:[q] padding:[q] lhs_dilation:[q] rhs_dilation:[q]
    window_reversal:[?] input_batch_dimension:q input_feature_dimension:q
    input_spatial_dimensions:[q] kernel_input_feature_dimension:q
    kernel_output_feature_dimension:q kernel_spatial_dimensions:[q] output_batch_dimension:q
    output_feature_dimension:q output_spatial_dimensions:[q] feature_group_count:q
    batch_group_count:q precision_config:[I]
StablehloScatterOptions indices_are_sorted:? update_window_dims:[q] inserted_window_dims:[q]
    scatter_dims_to_operand_dims:[q] index_vector_dim:q unique_indices:?
    update_computation_subgraph_index:i
StablehloCaseOptions branch_subgraph_indices:[i]
StablehloRngBitGeneratorOptions algorithm:b
Conv2DOptions padding:b stride_w:i stride_h:i fused_activation_function:b dilation_w_factor:i=1
    dilation_h_factor:i=1 quantized_bias_type:b
Conv3DOptions padding:b stride_d:i stride_w:i stride_h:i fused_activation_function:b
    dilation_d_factor:i=1 dilation_w_factor:i=1 dilation_h_factor:i=1
Pool2DOptions padding:b stride_w:i stride_h:i filter_width:i filter_height:i
    fused_activation_function:b
DepthwiseConv2DOptions padding:b stride_w:i stride_h:i depth_multiplier:i
    fused_activation_function:b dilation_w_factor:i=1 dilation_h_factor:i=1
ConcatEmbeddingsOptions num_channels:i num_columns_per_channel:[i] embedding_dim_per_channel:[i]
LSHProjectionOptions type:b
SVDFOptions rank:i fused_activation_function:b asymmetric_quantize_inputs:?
RNNOptions fused_activation_function:b asymmetric_quantize_inputs:?
SequenceRNNOptions time_major:? fused_activation_function:b asymmetric_quantize_inputs:?
BidirectionalSequenceRNNOptions time_major:? fused_activation_function:b merge_outputs:?
    asymmetric_quantize_inputs:?
FullyConnectedOptions fused_activation_function:b weights_format:b keep_num_dims:?
    asymmetric_quantize_inputs:? quantized_bias_type:b quant_spec:[B]
SoftmaxOptions beta:f
ConcatenationOptions axis:i fused_activation_function:b
AddOptions fused_activation_function:b pot_scale_int16:?=1
MulOptions fused_activation_function:b
L2NormOptions fused_activation_function:b
LocalResponseNormalizationOptions radius:i bias:f alpha:f beta:f
LSTMOptions fused_activation_function:b cell_clip:f proj_clip:f kernel_type:b
    asymmetric_quantize_inputs:?
UnidirectionalSequenceLSTMOptions fused_activation_function:b cell_clip:f proj_clip:f
    time_major:? asymmetric_quantize_inputs:? diagonal_recurrent_tensors:?
BidirectionalSequenceLSTMOptions fused_activation_function:b cell_clip:f proj_clip:f
    merge_outputs:? time_major:?=1 asymmetric_quantize_inputs:?
ResizeBilinearOptions -new_height:i -new_width:i align_corners:? half_pixel_centers:?
ResizeNearestNeighborOptions align_corners:? half_pixel_centers:?
CallOptions subgraph:I
PadOptions
PadV2Options
ReshapeOptions new_shape:[i]
SpaceToBatchNDOptions
BatchToSpaceNDOptions
SkipGramOptions ngram_size:i max_skip_size:i include_all_ngrams:?
SpaceToDepthOptions block_size:i
DepthToSpaceOptions block_size:i
SubOptions fused_activation_function:b pot_scale_int16:?=1
DivOptions fused_activation_function:b
TopKV2Options
EmbeddingLookupSparseOptions combiner:b
GatherOptions axis:i batch_dims:i
TransposeOptions
ExpOptions
CosOptions
ReducerOptions keep_dims:?
SqueezeOptions squeeze_dims:[i]
SplitOptions num_splits:i
SplitVOptions num_splits:i
StridedSliceOptions begin_mask:i end_mask:i ellipsis_mask:i new_axis_mask:i shrink_axis_mask:i
    offset:?
LogSoftmaxOptions
CastOptions in_data_type:b out_data_type:b
DequantizeOptions
MaximumMinimumOptions
TileOptions
ArgMaxOptions output_type:b
ArgMinOptions output_type:b
GreaterOptions
GreaterEqualOptions
LessOptions
LessEqualOptions
NegOptions
SelectOptions
SliceOptions
TransposeConvOptions padding:b stride_w:i stride_h:i fused_activation_function:b
    quantized_bias_type:b
ExpandDimsOptions
SparseToDenseOptions validate_indices:?
EqualOptions
NotEqualOptions
ShapeOptions out_type:b
RankOptions
PowOptions
FakeQuantOptions min:f max:f num_bits:i narrow_range:?
PackOptions values_count:i axis:i
LogicalOrOptions
OneHotOptions axis:i
AbsOptions
HardSwishOptions
LogicalAndOptions
LogicalNotOptions
UnpackOptions num:i axis:i
FloorDivOptions
SquareOptions
ZerosLikeOptions
FillOptions
FloorModOptions
RangeOptions
LeakyReluOptions alpha:f
SquaredDifferenceOptions
MirrorPadOptions mode:b
UniqueOptions idx_out_type:b=2
ReverseV2Options
AddNOptions
GatherNdOptions
WhereOptions
ReverseSequenceOptions seq_dim:i batch_dim:i
MatrixDiagOptions
QuantizeOptions
MatrixSetDiagOptions
IfOptions then_subgraph_index:i else_subgraph_index:i
CallOnceOptions init_subgraph_index:i
WhileOptions cond_subgraph_index:i body_subgraph_index:i
NonMaxSuppressionV4Options
NonMaxSuppressionV5Options
ScatterNdOptions
SelectV2Options
DensifyOptions
SegmentSumOptions
BatchMatMulOptions adj_x:? adj_y:? asymmetric_quantize_inputs:?
CumsumOptions exclusive:? reverse:?
BroadcastToOptions
Rfft2dOptions
HashtableOptions table_id:i key_dtype:b value_dtype:b
HashtableFindOptions
HashtableImportOptions
HashtableSizeOptions
VarHandleOptions container:s shared_name:s
ReadVariableOptions
AssignVariableOptions
RandomOptions seed:q seed2:q
BucketizeOptions boundaries:[f]
GeluOptions approximate:?
DynamicUpdateSliceOptions
UnsortedSegmentProdOptions
UnsortedSegmentMaxOptions
UnsortedSegmentSumOptions
ATan2Options
UnsortedSegmentMinOptions
SignOptions
BitcastOptions
BitwiseXorOptions
RightShiftOptions
DilateOptions
ReduceWindowOptions reduce_function:i
OperatorCode deprecated_builtin_code:b custom_code:s version:i=1 builtin_code:i
StableHLOCompositeOptions name:s decomposition_subgraph_index:i composite_attributes:[B]
    composite_attributes_format:b version:i
StablehloShiftLeftOptions
Operator opcode_index:I inputs:[i] outputs:[i] builtin_options:~BuiltinOptions
    custom_options:[B] custom_options_format:b mutating_variable_inputs:[?] intermediates:[i]
    large_custom_options_offset:Q large_custom_options_size:Q builtin_options_2:~BuiltinOptions2
    debug_metadata_index:i=-1
SubGraph tensors:[Tensor] inputs:[i] outputs:[i] operators:[Operator] name:s
    debug_metadata_index:i=-1
Buffer data:[B] offset:Q size:Q
ExternalBufferGroup name:s
ExternalBuffer id:I group:I offset:Q length:Q packing:s
Metadata name:s buffer:I
TensorMap name:s tensor_index:I
SignatureDef inputs:[TensorMap] outputs:[TensorMap] signature_key:s -deprecated_tag:s
    subgraph_index:I
Model version:I operator_codes:[OperatorCode] subgraphs:[SubGraph] description:s
    buffers:[Buffer] metadata_buffer:[i] metadata:[Metadata] signature_defs:[SignatureDef]
    external_buffer_groups:[ExternalBufferGroup] external_buffers:[ExternalBuffer]
"""
_UNIONS = {
    "QuantizationDetails": (
        "CustomQuantization BlockwiseQuantization MultiAxisQuantization"),
    "SparseIndexVector": (
        "Int32Vector Uint16Vector Uint8Vector"),
    "BuiltinOptions": (
        "Conv2DOptions DepthwiseConv2DOptions ConcatEmbeddingsOptions LSHProjectionOptions "
        "Pool2DOptions SVDFOptions RNNOptions FullyConnectedOptions SoftmaxOptions "
        "ConcatenationOptions AddOptions L2NormOptions LocalResponseNormalizationOptions "
        "LSTMOptions ResizeBilinearOptions CallOptions ReshapeOptions SkipGramOptions "
        "SpaceToDepthOptions EmbeddingLookupSparseOptions MulOptions PadOptions GatherOptions "
        "BatchToSpaceNDOptions SpaceToBatchNDOptions TransposeOptions ReducerOptions "
        "SubOptions DivOptions SqueezeOptions SequenceRNNOptions StridedSliceOptions "
        "ExpOptions TopKV2Options SplitOptions LogSoftmaxOptions CastOptions "
        "DequantizeOptions MaximumMinimumOptions ArgMaxOptions LessOptions NegOptions "
        "PadV2Options GreaterOptions GreaterEqualOptions LessEqualOptions SelectOptions "
        "SliceOptions TransposeConvOptions SparseToDenseOptions TileOptions ExpandDimsOptions "
        "EqualOptions NotEqualOptions ShapeOptions PowOptions ArgMinOptions FakeQuantOptions "
        "PackOptions LogicalOrOptions OneHotOptions LogicalAndOptions LogicalNotOptions "
        "UnpackOptions FloorDivOptions SquareOptions ZerosLikeOptions FillOptions "
        "BidirectionalSequenceLSTMOptions BidirectionalSequenceRNNOptions "
        "UnidirectionalSequenceLSTMOptions FloorModOptions RangeOptions "
        "ResizeNearestNeighborOptions LeakyReluOptions SquaredDifferenceOptions "
        "MirrorPadOptions AbsOptions SplitVOptions UniqueOptions ReverseV2Options AddNOptions "
        "GatherNdOptions CosOptions WhereOptions RankOptions ReverseSequenceOptions "
        "MatrixDiagOptions QuantizeOptions MatrixSetDiagOptions HardSwishOptions IfOptions "
        "WhileOptions DepthToSpaceOptions NonMaxSuppressionV4Options "
        "NonMaxSuppressionV5Options ScatterNdOptions SelectV2Options DensifyOptions "
        "SegmentSumOptions BatchMatMulOptions CumsumOptions CallOnceOptions "
        "BroadcastToOptions Rfft2dOptions Conv3DOptions HashtableOptions HashtableFindOptions "
        "HashtableImportOptions HashtableSizeOptions VarHandleOptions ReadVariableOptions "
        "AssignVariableOptions RandomOptions BucketizeOptions GeluOptions "
        "DynamicUpdateSliceOptions UnsortedSegmentProdOptions UnsortedSegmentMaxOptions "
        "UnsortedSegmentMinOptions UnsortedSegmentSumOptions ATan2Options SignOptions "
        "BitcastOptions BitwiseXorOptions RightShiftOptions"),
    "BuiltinOptions2": (
        "StablehloConcatenateOptions StablehloBroadcastInDimOptions StablehloSliceOptions "
        "StablehloConvolutionOptions StablehloCustomCallOptions StablehloReduceOptions "
        "StablehloScatterOptions StablehloCompareOptions StablehloDynamicSliceOptions "
        "StablehloPadOptions StablehloIotaOptions StablehloDotGeneralOptions "
        "StablehloReduceWindowOptions StablehloSortOptions StablehloWhileOptions "
        "StablehloGatherOptions StablehloTransposeOptions DilateOptions "
        "StablehloRngBitGeneratorOptions ReduceWindowOptions StableHLOCompositeOptions "
        "StablehloShiftLeftOptions StablehloCaseOptions"),
}

SCHEMA = parse_schema(_TABLES, _UNIONS)
UNION_MEMBERS = {name: tuple(members.split()) for name, members in _UNIONS.items()}
DEFAULTS = {kind: {f.name: f.default for f in fields} for kind, fields in SCHEMA.items()}
