package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/resource/schema/boolplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/setplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
)

// The plan modifiers most attributes take: an API default kept across plans
// (UseStateForUnknown), and what the API cannot change in place (RequiresReplace).
var (
	keepString     = []planmodifier.String{stringplanmodifier.UseStateForUnknown()}
	replaceString  = []planmodifier.String{stringplanmodifier.RequiresReplace()}
	keepReplString = []planmodifier.String{stringplanmodifier.UseStateForUnknown(), stringplanmodifier.RequiresReplace()}
	keepInt64      = []planmodifier.Int64{int64planmodifier.UseStateForUnknown()}
	keepReplInt64  = []planmodifier.Int64{int64planmodifier.UseStateForUnknown(), int64planmodifier.RequiresReplace()}
	keepBool       = []planmodifier.Bool{boolplanmodifier.UseStateForUnknown()}
	keepReplBool   = []planmodifier.Bool{boolplanmodifier.UseStateForUnknown(), boolplanmodifier.RequiresReplace()}
	keepSet        = []planmodifier.Set{setplanmodifier.UseStateForUnknown()}
)

// int64Decrease plans a replacement when the value goes down (a topic's partitions
// only grow in place).
func int64Decrease(description string) planmodifier.Int64 {
	return int64planmodifier.RequiresReplaceIf(
		func(_ context.Context, req planmodifier.Int64Request, resp *int64planmodifier.RequiresReplaceIfFuncResponse) {
			if known(req.StateValue) && known(req.PlanValue) {
				resp.RequiresReplace = req.PlanValue.ValueInt64() < req.StateValue.ValueInt64()
			}
		}, description, description)
}

// boolTurnedOff plans a replacement when a setting that cannot be undone in place
// (a topic's remote_storage) goes from true to false.
func boolTurnedOff(description string) planmodifier.Bool {
	return boolplanmodifier.RequiresReplaceIf(
		func(_ context.Context, req planmodifier.BoolRequest, resp *boolplanmodifier.RequiresReplaceIfFuncResponse) {
			if known(req.StateValue) && known(req.PlanValue) {
				resp.RequiresReplace = req.StateValue.ValueBool() && !req.PlanValue.ValueBool()
			}
		}, description, description)
}
