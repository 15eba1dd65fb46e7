package provider

import (
	"context"
	"net/url"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

func newLaneResource() resource.Resource { return &laneResource{} }

type laneResource struct{ base }

type laneModel struct {
	ID           types.String `tfsdk:"id"`
	Tenant       types.String `tfsdk:"tenant"`
	Name         types.String `tfsdk:"name"`
	AllTopics    types.Bool   `tfsdk:"all_topics"`
	Topics       types.Set    `tfsdk:"topics"`
	ConsumeTrunk types.Bool   `tfsdk:"consume_trunk"`
	OrphanPolicy types.String `tfsdk:"orphan_policy"`
	TTLs         types.Int64  `tfsdk:"ttl_s"`
	Partitions   types.Int64  `tfsdk:"partitions"`
	ForceDestroy types.Bool   `tfsdk:"force_destroy"`
}

type laneJSON struct {
	Tenant       string   `json:"tenant"`
	Name         string   `json:"name"`
	AllTopics    bool     `json:"all_topics"`
	Topics       []string `json:"topics"`
	ConsumeTrunk bool     `json:"consume_trunk"`
	OrphanPolicy string   `json:"orphan_policy"`
	TTLs         int64    `json:"ttl_s"`
	Partitions   *int64   `json:"partitions"`
}

func (r *laneResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_lane"
}

func (r *laneResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A lane: a named test environment of a tenant. Records tagged with it go to lane topics " +
			"`<tenant>.<topic>~<lane>`, made on first use. Changing `tenant` or `name` replaces the lane (and deletes " +
			"its lane topics); everything else changes in place.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{Computed: true, PlanModifiers: keepString,
				Description: "`<tenant>/<name>`."},
			"tenant": schema.StringAttribute{Optional: true, Computed: true, PlanModifiers: keepReplString,
				Description: "The tenant's slug; default: the caller's only tenant."},
			"name": schema.StringAttribute{Required: true, PlanModifiers: replaceString,
				Description: "The lane's name, e.g. `ppe` or `boe-alice`."},
			"all_topics": schema.BoolAttribute{Computed: true,
				Description: "Whether it covers every topic of the tenant: when `topics` is empty."},
			"topics": schema.SetAttribute{Optional: true, ElementType: types.StringType,
				Description: "The trunk topics it covers (full names, `<tenant>.<topic>`, or names in the tenant); none: every topic of the tenant."},
			"consume_trunk": schema.BoolAttribute{Optional: true, Computed: true, PlanModifiers: keepBool,
				Description: "The lane's consumers read the trunk topics too."},
			"orphan_policy": schema.StringAttribute{Optional: true, Computed: true, PlanModifiers: keepString,
				Validators:  []validator.String{stringvalidator.OneOf("trunk", "hold")},
				Description: "While no consumer of the lane is live: trunk consumers read its records (`trunk`) or they wait (`hold`)."},
			"ttl_s": schema.Int64Attribute{Optional: true, Computed: true, PlanModifiers: keepInt64,
				Description: "Deleted (its lane topics, then the lane) after this long without traffic."},
			"partitions": schema.Int64Attribute{Optional: true,
				Description: "Partitions of new lane topics; null: the trunk's count."},
			"force_destroy": schema.BoolAttribute{Optional: true,
				Description: "Destroy the lane even while it has live consumers (else the API refuses with 409 lane_in_use)."},
		},
	}
}

func (r *laneResource) attrs() map[string]bool {
	var resp resource.SchemaResponse
	r.Schema(context.Background(), resource.SchemaRequest{}, &resp)
	return attrNames(resp.Schema)
}

func laneState(ctx context.Context, l laneJSON, force types.Bool, named types.Set) laneModel {
	return laneModel{
		ID:           types.StringValue(l.Tenant + "/" + l.Name),
		Tenant:       types.StringValue(l.Tenant),
		Name:         types.StringValue(l.Name),
		AllTopics:    types.BoolValue(l.AllTopics),
		Topics:       topicsAsNamed(ctx, l.Tenant, l.Topics, named),
		ConsumeTrunk: types.BoolValue(l.ConsumeTrunk),
		OrphanPolicy: types.StringValue(l.OrphanPolicy),
		TTLs:         types.Int64Value(l.TTLs),
		Partitions:   int64OrNull(l.Partitions),
		ForceDestroy: force,
	}
}

func (r *laneResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan laneModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	b := body{}
	b.str("tenant", plan.Tenant)
	b.str("name", plan.Name)
	b.strings(ctx, "topics", plan.Topics, &resp.Diagnostics)
	b.boolean("consume_trunk", plan.ConsumeTrunk)
	b.str("orphan_policy", plan.OrphanPolicy)
	b.i64("ttl_s", plan.TTLs)
	b.i64("partitions", plan.Partitions)
	var created laneJSON
	if err := r.client.Post(ctx, "lanes", b, &created); err != nil {
		addAPIError(&resp.Diagnostics, "Could not create the lane", err, r.attrs())
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, laneState(ctx, created, plan.ForceDestroy, plan.Topics))...)
}

func (r *laneResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state laneModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	tenant, name := splitScopedID(state.ID.ValueString())
	var lane laneJSON
	err := r.client.Get(ctx, "lanes/"+escape(name), tenantQuery(tenant), &lane)
	gone, err := r.client.Gone(ctx, err, tenant)
	if gone {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, "Could not read the lane", err, r.attrs())
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, laneState(ctx, lane, state.ForceDestroy, state.Topics))...)
}

func (r *laneResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state laneModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	c := changes{body{}}
	if !plan.Topics.Equal(state.Topics) {
		topics := stringsOf(ctx, plan.Topics, &resp.Diagnostics)
		c.body["topics"] = topics
		c.body["all_topics"] = len(topics) == 0
	}
	c.boolean("consume_trunk", plan.ConsumeTrunk, state.ConsumeTrunk)
	c.str("orphan_policy", plan.OrphanPolicy, state.OrphanPolicy)
	c.i64("ttl_s", plan.TTLs, state.TTLs)
	c.nullableI64("partitions", plan.Partitions, state.Partitions)
	tenant, name := splitScopedID(state.ID.ValueString())
	var lane laneJSON
	if err := r.client.Patch(ctx, "lanes/"+escape(name), tenantQuery(tenant), c.body, &lane); err != nil {
		addAPIError(&resp.Diagnostics, "Could not change the lane", err, r.attrs())
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, laneState(ctx, lane, plan.ForceDestroy, plan.Topics))...)
}

func (r *laneResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state laneModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	tenant, name := splitScopedID(state.ID.ValueString())
	query := tenantQuery(tenant)
	if state.ForceDestroy.ValueBool() {
		if query == nil {
			query = url.Values{}
		}
		query.Set("force", "true")
	}
	_, err := r.client.Gone(ctx, r.client.Delete(ctx, "lanes/"+escape(name), query), tenant)
	if err != nil {
		addAPIError(&resp.Diagnostics, "Could not delete the lane", err, r.attrs())
	}
}

// ImportState takes `<tenant>/<name>`.
func (r *laneResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importScoped(ctx, req, resp)
}

// importScoped sets the id of a resource named within its tenant, `<tenant>/<name>`.
func importScoped(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	tenant, name := splitScopedID(req.ID)
	if tenant == "" || name == "" {
		resp.Diagnostics.AddError("Invalid import id", "expected <tenant>/<name>, got \""+req.ID+"\"")
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), req.ID)...)
}
