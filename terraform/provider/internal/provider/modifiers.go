package provider

import (
	"context"
	"slices"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/boolplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/setplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"
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

// settling plans an update of an object whose status in the state is one of unsettled
// (a create whose wait was interrupted): the update waits until the control plane
// finishes it, and the status is known after apply.
func settling(unsettled ...string) planmodifier.String {
	return settlingModifier{unsettled}
}

type settlingModifier struct{ unsettled []string }

func (m settlingModifier) Description(context.Context) string {
	return "An object not ready yet is updated: the update waits for it."
}

func (m settlingModifier) MarkdownDescription(ctx context.Context) string {
	return m.Description(ctx)
}

func (m settlingModifier) PlanModifyString(_ context.Context, req planmodifier.StringRequest, resp *planmodifier.StringResponse) {
	if req.State.Raw.IsNull() || req.Plan.Raw.IsNull() {
		return // created or destroyed: nothing to settle
	}
	if known(req.StateValue) && slices.Contains(m.unsettled, req.StateValue.ValueString()) {
		resp.PlanValue = types.StringUnknown()
	}
}

// otherTopic plans a replacement when the topic named changes, not when the same topic
// is named another way (`orders` and `<tenant>.orders`, the tenant the state's).
func otherTopic(description string) planmodifier.String {
	return stringplanmodifier.RequiresReplaceIf(
		func(ctx context.Context, req planmodifier.StringRequest, resp *stringplanmodifier.RequiresReplaceIfFuncResponse) {
			var tenant types.String
			resp.Diagnostics.Append(req.State.GetAttribute(ctx, path.Root("tenant"), &tenant)...)
			if known(req.StateValue) && known(req.PlanValue) {
				t := tenant.ValueString()
				resp.RequiresReplace = fullTopicName(t, req.PlanValue.ValueString()) != fullTopicName(t, req.StateValue.ValueString())
			}
		}, description, description)
}
