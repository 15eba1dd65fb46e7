package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

func newQuotaResource() resource.Resource { return &quotaResource{} }

type quotaResource struct{ base }

// quotaLimits are the limits, in the API's order and names.
var quotaLimits = []string{
	"max_topics", "max_partitions", "max_storage_bytes", "produce_bytes_per_s",
	"fetch_bytes_per_s", "requests_per_s", "max_lanes", "max_mirrors", "max_exports", "max_indexes",
}

var quotaHelp = map[string]string{
	"max_topics":          "Trunk topics (lane topics do not count).",
	"max_partitions":      "Partitions of trunk topics.",
	"max_storage_bytes":   "Reserved storage: partitions x retention_bytes, summed over topics; also the bytes stored.",
	"produce_bytes_per_s": "Produce rate, per broker (as Kafka's quotas); 0: unlimited.",
	"fetch_bytes_per_s":   "Fetch rate, per broker; 0: unlimited.",
	"requests_per_s":      "Requests, per broker; 0: unlimited.",
	"max_lanes":           "Lanes declared.",
	"max_mirrors":         "Mirror links.",
	"max_exports":         "Parquet exports.",
	"max_indexes":         "Secondary indexes.",
}

func (r *quotaResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_quota"
}

func (r *quotaResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	attributes := map[string]schema.Attribute{
		"id": schema.StringAttribute{Computed: true, PlanModifiers: keepString,
			Description: "The tenant's slug."},
		"tenant": schema.StringAttribute{Required: true, PlanModifiers: replaceString,
			Description: "The tenant's slug."},
	}
	for _, name := range quotaLimits {
		attributes[name] = schema.Int64Attribute{Optional: true, Computed: true, PlanModifiers: keepInt64,
			Validators:  []validator.Int64{int64validator.AtLeast(0)},
			Description: quotaHelp[name] + " Unset: left as it is."}
	}
	resp.Schema = schema.Schema{
		Description: "A tenant's quota (platform administrators only). Every tenant has one from its creation, so " +
			"creating this resource sets the limits it names and destroying it leaves them as they are (it only " +
			"stops managing them). Counts and storage cannot go below what the tenant uses (409 quota_exceeded).",
		Attributes: attributes,
	}
}

func (r *quotaResource) attrs() map[string]bool {
	var resp resource.SchemaResponse
	r.Schema(context.Background(), resource.SchemaRequest{}, &resp)
	return attrNames(resp.Schema)
}

// quotaModel is read and written attribute by attribute (path.Root(limit)): the limits
// are one list, so the code does not name each.
func (r *quotaResource) apply(ctx context.Context, tenant string, plan, state attrGetter, dst attrSetter) bool {
	b := body{}
	for _, name := range quotaLimits {
		var want, have types.Int64
		if plan.GetAttribute(ctx, path.Root(name), &want).HasError() {
			return false
		}
		if state != nil {
			state.GetAttribute(ctx, path.Root(name), &have)
		}
		if known(want) && !want.Equal(have) {
			b[name] = want.ValueInt64()
		}
	}
	var quota map[string]any
	if err := r.client.Patch(ctx, "quotas/"+escape(tenant), nil, b, &quota); err != nil {
		diags := dst.diags()
		addAPIError(diags, "Could not set the quota", err, r.attrs())
		return false
	}
	return r.store(ctx, tenant, quota, dst)
}

func (r *quotaResource) store(ctx context.Context, tenant string, quota map[string]any, dst attrSetter) bool {
	diags := dst.diags()
	diags.Append(dst.SetAttribute(ctx, path.Root("id"), tenant)...)
	diags.Append(dst.SetAttribute(ctx, path.Root("tenant"), tenant)...)
	for _, name := range quotaLimits {
		value, _ := quota[name].(float64)
		diags.Append(dst.SetAttribute(ctx, path.Root(name), types.Int64Value(int64(value)))...)
	}
	return !diags.HasError()
}

func (r *quotaResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var tenant types.String
	resp.Diagnostics.Append(req.Plan.GetAttribute(ctx, path.Root("tenant"), &tenant)...)
	if resp.Diagnostics.HasError() {
		return
	}
	r.apply(ctx, tenant.ValueString(), req.Plan, nil, stateSetter{&resp.State, &resp.Diagnostics})
}

func (r *quotaResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var id types.String
	resp.Diagnostics.Append(req.State.GetAttribute(ctx, path.Root("id"), &id)...)
	if resp.Diagnostics.HasError() {
		return
	}
	var quota map[string]any
	err := r.client.Get(ctx, "quotas/"+escape(id.ValueString()), nil, &quota)
	gone, err := r.client.Gone(ctx, err, id.ValueString())
	if gone {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, "Could not read the quota", err, r.attrs())
		return
	}
	r.store(ctx, id.ValueString(), quota, stateSetter{&resp.State, &resp.Diagnostics})
}

func (r *quotaResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var id types.String
	resp.Diagnostics.Append(req.State.GetAttribute(ctx, path.Root("id"), &id)...)
	if resp.Diagnostics.HasError() {
		return
	}
	r.apply(ctx, id.ValueString(), req.Plan, req.State, stateSetter{&resp.State, &resp.Diagnostics})
}

// Delete stops managing the quota: a tenant always has one, so the limits stay.
func (r *quotaResource) Delete(context.Context, resource.DeleteRequest, *resource.DeleteResponse) {}

// ImportState takes the tenant's slug.
func (r *quotaResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), req.ID)...)
}
