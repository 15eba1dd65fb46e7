package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/listplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

func newIndexResource() resource.Resource { return &indexResource{} }

type indexResource struct{ base }

type indexModel struct {
	ID           types.String `tfsdk:"id"`
	Tenant       types.String `tfsdk:"tenant"`
	Name         types.String `tfsdk:"name"`
	Description  types.String `tfsdk:"description"`
	Topic        types.String `tfsdk:"topic"`
	ValueFormat  types.String `tfsdk:"value_format"`
	Fields       types.List   `tfsdk:"fields"`
	IncludeLanes types.Bool   `tfsdk:"include_lanes"`
}

type indexJSON struct {
	Tenant       string      `json:"tenant"`
	Name         string      `json:"name"`
	Description  string      `json:"description"`
	Topic        string      `json:"topic"`
	ValueFormat  string      `json:"value_format"`
	Fields       []fieldJSON `json:"fields"`
	IncludeLanes bool        `json:"include_lanes"`
}

func (r *indexResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_index"
}

func (r *indexResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A secondary index on JSON fields of a tiered topic's records, answering the Index Query " +
			"(`GET /api/v1/indexes/{name}/query?field=value`). Its topic, fields, format and lanes are its identity: " +
			"changing any of them (or `tenant`, `name`) replaces the index and its files; `description` changes in place.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{Computed: true, PlanModifiers: keepString,
				Description: "`<tenant>/<name>`."},
			"tenant": schema.StringAttribute{Optional: true, Computed: true, PlanModifiers: keepReplString,
				Description: "The tenant's slug; default: the caller's only tenant."},
			"name": schema.StringAttribute{Required: true, PlanModifiers: replaceString,
				Description: "The index's name."},
			"description": schema.StringAttribute{Optional: true, Computed: true, PlanModifiers: keepString,
				Description: "Free text, at most 500 characters."},
			"topic": schema.StringAttribute{Required: true,
				PlanModifiers: []planmodifier.String{otherTopic("Another topic replaces the index.")},
				Description:   "The topic: its full name, `<tenant>.<topic>`, or its name in the tenant; naming the same topic the other way changes nothing."},
			"value_format": schema.StringAttribute{Optional: true, Computed: true, PlanModifiers: keepReplString,
				Validators:  []validator.String{stringvalidator.OneOf("json")},
				Description: "`json`: the only format indexed."},
			"fields": fieldsAttribute(true, "The indexed fields, 1 to 8.",
				[]planmodifier.List{listplanmodifier.RequiresReplace()}),
			"include_lanes": schema.BoolAttribute{Optional: true, Computed: true, PlanModifiers: keepReplBool,
				Description: "Index the topic's lane topics too."},
		},
	}
}

func (r *indexResource) attrs() map[string]bool {
	var resp resource.SchemaResponse
	r.Schema(context.Background(), resource.SchemaRequest{}, &resp)
	return attrNames(resp.Schema)
}

func indexState(i indexJSON, named types.String) indexModel {
	return indexModel{
		ID:           types.StringValue(i.Tenant + "/" + i.Name),
		Tenant:       types.StringValue(i.Tenant),
		Name:         types.StringValue(i.Name),
		Description:  types.StringValue(i.Description),
		Topic:        topicAsNamed(i.Tenant, i.Topic, named),
		ValueFormat:  types.StringValue(i.ValueFormat),
		Fields:       fieldsValue(i.Fields),
		IncludeLanes: types.BoolValue(i.IncludeLanes),
	}
}

func (r *indexResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan indexModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	b := body{}
	b.str("tenant", plan.Tenant)
	b.str("name", plan.Name)
	b.str("description", plan.Description)
	b.str("topic", plan.Topic)
	b.str("value_format", plan.ValueFormat)
	b["fields"] = fieldsOf(ctx, plan.Fields, &resp.Diagnostics)
	b.boolean("include_lanes", plan.IncludeLanes)
	var created indexJSON
	if err := r.client.Post(ctx, "indexes", b, &created); err != nil {
		addAPIError(&resp.Diagnostics, "Could not create the index", err, r.attrs())
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, indexState(created, plan.Topic))...)
}

func (r *indexResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state indexModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	tenant, name := splitScopedID(state.ID.ValueString())
	var index indexJSON
	err := r.client.Get(ctx, "indexes/"+escape(name), tenantQuery(tenant), &index)
	gone, err := r.client.Gone(ctx, err, tenant)
	if gone {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, "Could not read the index", err, r.attrs())
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, indexState(index, state.Topic))...)
}

func (r *indexResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state indexModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	c := changes{body{}}
	c.str("description", plan.Description, state.Description)
	tenant, name := splitScopedID(state.ID.ValueString())
	var index indexJSON
	if err := r.client.Patch(ctx, "indexes/"+escape(name), tenantQuery(tenant), c.body, &index); err != nil {
		addAPIError(&resp.Diagnostics, "Could not change the index", err, r.attrs())
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, indexState(index, plan.Topic))...)
}

func (r *indexResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state indexModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	tenant, name := splitScopedID(state.ID.ValueString())
	_, err := r.client.Gone(ctx, r.client.Delete(ctx, "indexes/"+escape(name), tenantQuery(tenant)), tenant)
	if err != nil {
		addAPIError(&resp.Diagnostics, "Could not delete the index", err, r.attrs())
	}
}

// ImportState takes `<tenant>/<name>`.
func (r *indexResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importScoped(ctx, req, resp)
}
