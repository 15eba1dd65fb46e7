package provider

import (
	"context"
	"fmt"
	"strconv"

	"github.com/hashicorp/terraform-plugin-framework-validators/setvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

func newTopicACLResource() resource.Resource { return &topicACLResource{} }

type topicACLResource struct{ base }

type topicACLModel struct {
	ID         types.String `tfsdk:"id"`
	Tenant     types.String `tfsdk:"tenant"`
	Topic      types.String `tfsdk:"topic"`
	Region     types.String `tfsdk:"region"`
	Principal  types.String `tfsdk:"principal"`
	Operations types.Set    `tfsdk:"operations"`
}

type topicACLJSON struct {
	ID         int64    `json:"id"`
	Tenant     string   `json:"tenant"`
	Topic      string   `json:"topic"`
	Region     string   `json:"region"`
	Principal  string   `json:"principal"`
	Operations []string `json:"operations"`
}

func (r *topicACLResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_topic_acl"
}

func (r *topicACLResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "An ACL entry of a topic: what a principal (a service account's client id, or a person's subject) " +
			"may do on it. Once a topic has entries, its callers other than tenant admins may do only what an entry " +
			"naming them lists; brokers enforce it from the controller's next push. Granting and revoking need the " +
			"tenant-admin role. Changing `topic`, `region` or `principal` replaces the entry; `operations` change in place.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{Computed: true, PlanModifiers: keepString,
				Description: "The entry's numeric id."},
			"tenant": schema.StringAttribute{Optional: true, Computed: true, PlanModifiers: keepReplString,
				Description: "The tenant's slug; default: the topic's."},
			"topic": schema.StringAttribute{Required: true, PlanModifiers: replaceString,
				Description: "The topic's full name, `<tenant>.<name>`."},
			"region": schema.StringAttribute{Optional: true, Computed: true, PlanModifiers: keepReplString,
				Description: "The region of the topic of that name (a mirror copy's); default: the origin's."},
			"principal": schema.StringAttribute{Required: true, PlanModifiers: replaceString,
				Description: "A service account's client id (`<tenant>--<name>`) or a person's subject."},
			"operations": schema.SetAttribute{Required: true, ElementType: types.StringType,
				Validators: []validator.Set{setvalidator.SizeAtLeast(1),
					setvalidator.ValueStringsAre(stringvalidator.OneOf("produce", "consume", "admin"))},
				Description: "What the principal may do: `produce`, `consume` (read and commit offsets), `admin` (alter, delete)."},
		},
	}
}

func (r *topicACLResource) attrs() map[string]bool {
	var resp resource.SchemaResponse
	r.Schema(context.Background(), resource.SchemaRequest{}, &resp)
	return attrNames(resp.Schema)
}

func topicACLState(a topicACLJSON) topicACLModel {
	return topicACLModel{
		ID:         types.StringValue(strconv.FormatInt(a.ID, 10)),
		Tenant:     types.StringValue(a.Tenant),
		Topic:      types.StringValue(a.Topic),
		Region:     types.StringValue(a.Region),
		Principal:  types.StringValue(a.Principal),
		Operations: setOf(a.Operations),
	}
}

func (r *topicACLResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan topicACLModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	b := body{}
	b.str("tenant", plan.Tenant)
	b.str("topic", plan.Topic)
	b.str("region", plan.Region)
	b.str("principal", plan.Principal)
	b.strings(ctx, "operations", plan.Operations, &resp.Diagnostics)
	var created topicACLJSON
	if err := r.client.Post(ctx, "topic-acls", b, &created); err != nil {
		addAPIError(&resp.Diagnostics, "Could not grant the topic ACL", err, r.attrs())
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, topicACLState(created))...)
}

func (r *topicACLResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state topicACLModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	var acl topicACLJSON
	err := r.client.Get(ctx, "topic-acls/"+escape(state.ID.ValueString()), nil, &acl)
	gone, err := r.client.Gone(ctx, err, state.Tenant.ValueString())
	if gone {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, "Could not read the topic ACL", err, r.attrs())
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, topicACLState(acl))...)
}

func (r *topicACLResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state topicACLModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	b := body{}
	b.strings(ctx, "operations", plan.Operations, &resp.Diagnostics)
	var acl topicACLJSON
	if err := r.client.Patch(ctx, "topic-acls/"+escape(state.ID.ValueString()), nil, b, &acl); err != nil {
		addAPIError(&resp.Diagnostics, "Could not change the topic ACL", err, r.attrs())
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, topicACLState(acl))...)
}

func (r *topicACLResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state topicACLModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	_, err := r.client.Gone(ctx, r.client.Delete(ctx, "topic-acls/"+escape(state.ID.ValueString()), nil), state.Tenant.ValueString())
	if err != nil {
		addAPIError(&resp.Diagnostics, "Could not revoke the topic ACL", err, r.attrs())
	}
}

// ImportState takes the entry's numeric id.
func (r *topicACLResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	if _, err := strconv.ParseInt(req.ID, 10, 64); err != nil {
		resp.Diagnostics.AddError("Invalid import id", fmt.Sprintf("expected the ACL entry's numeric id, got %q", req.ID))
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), req.ID)...)
}
